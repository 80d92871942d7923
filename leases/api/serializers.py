"""Request and response shapes of the JSON API. Lease parameters (``duration``, ``lease_id``, ...)
are checked here for their JSON type only; the view parses them with the Azure door's rules
(leases.domain.lease_params) and the state machine decides whether they are missing or out of range,
so both doors refuse with the same code and both record the refusal."""

from __future__ import annotations

import base64
import binascii
import json

from django.core.validators import RegexValidator
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty

from leases.domain import fingerprints, machine, waiting
from leases.domain import metadata as metadata_rules
from leases.domain.errors import LeaseholdError
from leases.models import Blob, Container, LeaseEvent

# Values that end up in HTTP headers of the Azure endpoint (metadata,
# content type) must be printable ASCII there, so they are here too.
HEADER_SAFE = RegexValidator(r"^[\x20-\x7e]*$", "Only printable ASCII characters are allowed.")


# ------------------------------------------------------------------ lease parameters

class LeaseParam(serializers.Field):
    """A lease parameter: checked for its JSON types only (``json_types``)."""

    json_types: tuple[type, ...] = ()

    def validate_empty_values(self, data):
        if data is empty or data is None:
            return True, None  # absent: the service answers MissingRequiredHeader, as on Azure
        return False, data

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, self.json_types):
            raise LeaseholdError("InvalidHeaderValue", field=self.field_name, value=json.dumps(data))
        return data  # parsed by leases.domain.lease_params, as the Azure door parses a header value


@extend_schema_field({"type": "string", "format": "uuid"})
class LeaseIdParam(LeaseParam):
    json_types = (str,)


@extend_schema_field({"oneOf": [{"type": "integer", "enum": [machine.INFINITE]},
                                {"type": "integer", "minimum": machine.MIN_DURATION,
                                 "maximum": machine.MAX_DURATION}]})
class DurationParam(LeaseParam):
    json_types = (int,)


@extend_schema_field({"type": "integer", "minimum": machine.MIN_BREAK_PERIOD, "maximum": machine.MAX_BREAK_PERIOD})
class BreakPeriodParam(LeaseParam):
    json_types = (int,)


@extend_schema_field({"type": "number", "minimum": 0, "maximum": waiting.MAX_WAIT})
class WaitParam(serializers.Field):
    """Seconds an acquire may wait for a held lease (leases/domain/waiting.py): a JSON number, 0-60."""

    def validate_empty_values(self, data):
        if data is empty or data is None:
            return True, None
        return False, data

    def to_internal_value(self, data):
        return waiting.seconds_from_json(data)


REASON = {"max_length": 500, "required": False, "allow_blank": True, "default": "",
          "help_text": "Why, for the lease history."}
REASON_MAX: int = REASON["max_length"]  # type: ignore[assignment]  # characters, once trimmed


def json_shape(serializer_class) -> dict[str, tuple[type, ...] | None]:
    """A lease action input's plain fields: a lease parameter's JSON types, or None for the free text
    ``reason`` (at most REASON_MAX characters, trimmed); a field of any other kind (the acquire's
    ``wait``) is left out. What a body may hold for the lean path to take it (leases/api/lean.py)."""
    shape: dict[str, tuple[type, ...] | None] = {}
    for name, field in serializer_class().fields.items():
        if isinstance(field, LeaseParam):
            shape[name] = field.json_types
        elif isinstance(field, serializers.CharField) and not isinstance(field, WaitParam):
            shape[name] = None
    return shape


class AcquireInput(serializers.Serializer):
    duration = DurationParam(help_text="Seconds, 15 to 60, or -1 for a lease that never expires.")
    proposed_lease_id = LeaseIdParam(required=False, help_text="The lease id to use; drawn by the server if absent.")
    wait = WaitParam(required=False, help_text=(
        "A Leasehold extension: while someone else holds the lease, wait up to this many seconds (0-60) for it "
        "(its release, break or expiry) and answer then; 409 with retry_after if the wait runs out."))


class RenewInput(serializers.Serializer):
    lease_id = LeaseIdParam()


class ChangeInput(serializers.Serializer):
    lease_id = LeaseIdParam()
    proposed_lease_id = LeaseIdParam(help_text="The new lease id.")


class ReleaseInput(serializers.Serializer):
    lease_id = LeaseIdParam()
    reason = serializers.CharField(**REASON)


class BreakInput(serializers.Serializer):
    break_period = BreakPeriodParam(
        required=False, help_text="Seconds until the lease is broken (only shortens the lease). Absent: a fixed "
                                  "lease breaks when it would expire, an infinite lease at once.")
    reason = serializers.CharField(**REASON)


# ------------------------------------------------------------------ resource inputs

class MetadataField(serializers.DictField):
    """Name-value pairs, checked by the rules both doors share
    (leases/domain/metadata.py): C# identifiers, case kept, printable ASCII values,
    8 KiB in all."""

    child = serializers.CharField(allow_blank=True, trim_whitespace=False, validators=[HEADER_SAFE])

    def to_internal_value(self, data):
        return metadata_rules.validate(data)


@extend_schema_field({"type": "string", "format": "byte"})
class Base64Field(serializers.Field):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("Expected a base64 string.")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("Not valid base64.") from None


class ContainerInput(serializers.Serializer):
    metadata = MetadataField(required=False, default=dict)
    public_access = serializers.ChoiceField(choices=["container", "blob"], allow_blank=True, default="",
                                            help_text="Anonymous read access, as x-ms-blob-public-access.")


class BlobInput(serializers.Serializer):
    content = Base64Field(required=False, help_text="The blob's bytes, base64-encoded; none if absent.")
    content_type = serializers.CharField(max_length=255, allow_blank=True, default="", validators=[HEADER_SAFE])
    metadata = MetadataField(required=False, default=dict)
    lease_id = LeaseIdParam(required=False, help_text="Required while the blob is leased.")


# ------------------------------------------------------------------ outputs

class LeaseHolderSerializer(serializers.Serializer):
    actor = serializers.CharField(help_text='Who acquired it: "token:<name>", "user:<name>", "account:<name>".')
    address = serializers.CharField(allow_blank=True)
    client_request_id = serializers.CharField(allow_blank=True)
    acquired_at = serializers.DateTimeField(allow_null=True)


class LeaseSerializer(serializers.Serializer):
    """The lease of a container or blob as of the request's instant."""

    state = serializers.ChoiceField(choices=machine.STATES)
    status = serializers.ChoiceField(choices=["locked", "unlocked"])
    duration = serializers.ChoiceField(choices=["fixed", "infinite"], allow_null=True,
                                       help_text="Only while leased, as x-ms-lease-duration.")
    duration_seconds = serializers.IntegerField(allow_null=True, help_text="As acquired; -1 is infinite.")
    lease_fingerprint = serializers.CharField(
        allow_null=True, help_text="The fingerprint of the lease id (12 hex digits, as in the history), never the "
                                   "id itself: only the acquire or change that made an id answers with it.")
    expires_at = serializers.DateTimeField(allow_null=True)
    remaining_seconds = serializers.IntegerField(
        allow_null=True, help_text="Seconds until the lease stops locking the resource (rounded up): 0 if "
                                   "unlocked, null for an infinite lease.")
    break_ends_at = serializers.DateTimeField(allow_null=True)
    generation = serializers.IntegerField(help_text="Fencing token: one more for every new lease.")
    last_holder = LeaseHolderSerializer(allow_null=True)

    def to_representation(self, instance):
        return super().to_representation(lease_facts(instance, self.context["now"]))


def lease_facts(obj: Container | Blob, now) -> dict:
    state = obj.effective_lease_state(now)
    remaining = machine.seconds_remaining(obj.lease_record, now)
    holder = None
    if obj.lease_acquired_at is not None:
        holder = {"actor": obj.lease_holder, "address": obj.lease_holder_address,
                  "client_request_id": obj.lease_holder_request_id, "acquired_at": obj.lease_acquired_at}
    return {
        "state": state, "status": machine.lease_status(state),
        "duration": machine.duration_type(obj.lease_record, state), "duration_seconds": obj.lease_duration,
        "lease_fingerprint": fingerprints.of(obj.lease_id) or None, "expires_at": obj.lease_expires_at,
        "remaining_seconds": remaining,
        "break_ends_at": obj.lease_break_at, "generation": obj.lease_generation, "last_holder": holder,
    }


class MetadataOutput(serializers.DictField):
    child = serializers.CharField()


class ContainerSerializer(serializers.ModelSerializer):
    account = serializers.CharField(source="account.name")
    metadata = MetadataOutput()
    lease = LeaseSerializer(source="*")

    class Meta:
        model = Container
        fields = ["account", "name", "metadata", "public_access", "etag", "last_modified", "created_at", "lease"]


class BlobSerializer(serializers.ModelSerializer):
    account = serializers.CharField(source="container.account.name")
    container = serializers.CharField(source="container.name")
    metadata = MetadataOutput()
    lease = LeaseSerializer(source="*")

    class Meta:
        model = Blob
        fields = ["account", "container", "name", "size", "content_type", "content_md5", "metadata", "etag",
                  "last_modified", "created_at", "lease"]


class LeaseActionResultSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=machine.ACTIONS)
    lease_id = serializers.UUIDField(allow_null=True, help_text=(
        "The lease id to use from now on: acquire, change, and renew (the id it was sent); null after release and "
        "break (only a lease's holder learns its id)."))
    lease_time = serializers.IntegerField(allow_null=True, help_text="break: seconds until the lease is broken.")
    generation = serializers.IntegerField(help_text="Fencing token of the lease.")
    etag = serializers.CharField()
    last_modified = serializers.DateTimeField()
    lease = LeaseSerializer(help_text="The resource's lease after the action.")


def lease_action_result(*, action: str, lease_id, lease_time: int | None, generation: int, obj: Container | Blob,
                        now) -> dict:
    """What ``LeaseActionResultSerializer`` renders, built directly: the
    answer of every JSON lease action, without a serializer's fields made
    and copied per request. Same keys, order and values (the serializer
    stays the schema's; tests/api/test_api_leases.py holds the two equal)."""
    facts = lease_facts(obj, now)
    zone = timezone.get_current_timezone()  # once, not per time
    holder = facts["last_holder"]
    if holder is not None:
        holder = {"actor": str(holder["actor"]), "address": str(holder["address"]),
                  "client_request_id": str(holder["client_request_id"]),
                  "acquired_at": _when(holder["acquired_at"], zone)}
    lease = {
        "state": facts["state"], "status": facts["status"], "duration": facts["duration"],
        "duration_seconds": _int(facts["duration_seconds"]), "lease_fingerprint": facts["lease_fingerprint"],
        "expires_at": _when(facts["expires_at"], zone), "remaining_seconds": _int(facts["remaining_seconds"]),
        "break_ends_at": _when(facts["break_ends_at"], zone), "generation": int(facts["generation"]),
        "last_holder": holder,
    }
    return {"action": action, "lease_id": None if lease_id is None else str(lease_id), "lease_time": _int(lease_time),
            "generation": int(generation), "etag": str(obj.etag), "last_modified": _when(obj.last_modified, zone),
            "lease": lease}


def _int(value) -> int | None:
    return None if value is None else int(value)


def _when(value, zone=None) -> str | None:
    """As DRF's DateTimeField renders it: ISO 8601 in the current time zone
    (``zone``, if the caller looked it up), UTC as Z."""
    if not value:
        return None
    text = timezone.localtime(value, zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


EVENT_FIELDS = ["id", "occurred_at", "action", "outcome", "resource_type", "account", "container", "blob",
                "lease_fingerprint", "proposed_lease_fingerprint", "duration", "break_period", "lease_time", "expires_at",
                "state_before", "state_after", "generation", "status_code", "error_code", "actor", "via",
                "reason", "request_id", "client_request_id", "remote_addr", "user_agent"]


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = LeaseEvent
        fields = EVENT_FIELDS


class HolderQuery(serializers.Serializer):
    account = serializers.CharField()
    container = serializers.CharField()
    blob = serializers.CharField(required=False, allow_blank=True, default="",
                                 help_text="Absent for the container's own lease.")
    at = serializers.DateTimeField(required=False, help_text="ISO 8601; default now.")


class HolderSerializer(serializers.Serializer):
    lease_fingerprint = serializers.CharField(allow_null=True, help_text="The lease id's fingerprint.")
    holder = serializers.CharField(help_text="The actor of the acquire that started this lease.")
    client_request_id = serializers.CharField(allow_blank=True)
    remote_addr = serializers.CharField(allow_blank=True)
    since = serializers.DateTimeField()
    until = serializers.DateTimeField(allow_null=True, help_text="Null: an infinite lease.")
    state = serializers.CharField(help_text="leased or breaking.")
    generation = serializers.IntegerField()


class HolderAnswerSerializer(serializers.Serializer):
    account = serializers.CharField()
    container = serializers.CharField()
    blob = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()
    holder = HolderSerializer(allow_null=True, help_text="Null: nobody held a lease then.")


class ErrorSerializer(serializers.Serializer):
    """Every refusal. ``code`` is the Azure error code the Azure endpoint
    would answer (or, for what only this API does: InvalidInput,
    NotAcceptable, UnsupportedMediaType, TooManyRequests)."""

    code = serializers.CharField()
    message = serializers.CharField()
    request_id = serializers.CharField(help_text="Also in the X-Request-Id header and the lease history.")
    field = serializers.CharField(required=False, help_text="The offending JSON field, query parameter or header.")
    value = serializers.CharField(required=False)
    reason = serializers.CharField(required=False)
    errors = serializers.JSONField(required=False, help_text="Per-field messages.")
    lease_state = serializers.ChoiceField(choices=machine.STATES, required=False,
                                          help_text="Refused acquire: the current state.")
    retry_after = serializers.IntegerField(required=False, allow_null=True,
                                           help_text="Refused acquire: seconds until it can be acquired; null: "
                                                     "only after a release or break.")
    generation = serializers.IntegerField(required=False, help_text="Refused acquire: the current generation.")

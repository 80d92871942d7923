"""The JSON API under /api/v1/: a second door into the services the Azure
endpoint calls, with the same status codes and error codes, plus the lease
history for auditors. Views here translate JSON into service calls and
results into JSON; they hold no lease rules."""

def test_sdk_round_trip(service, clock):
    container = service.create_container("smoke")
    blob = container.upload_blob("a/b c(1).txt", b"hello")
    lease = blob.acquire_lease(lease_duration=15)
    assert blob.get_blob_properties().lease.state == "leased"
    clock.advance(16)
    assert blob.get_blob_properties().lease.state == "expired"
    lease.renew()
    assert blob.get_blob_properties().lease.state == "leased"

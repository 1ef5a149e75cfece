# No await needed: without an event loop, host calls block and return their value.
hits = host.search("json")
[hit["name"] for hit in hits]

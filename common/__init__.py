"""The informer core shared by the reflector and the processors.

Nothing here talks to Redis or Kubernetes: it is the client-go informer machinery (keys, deltas,
the indexed store, handlers, the workqueue) plus the pieces that make it a distributed pipeline
(sharding, the wire format). Both services build on it; it imports neither.
"""

"""The application layer: the ``informer-bus`` command line and the tools around the services.

It sits above both services and ``common``; the services never import it.
"""

__version__ = "0.1.0"

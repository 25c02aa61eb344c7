"""Serving and deployment pieces shared by both adapters, outside the engine-neutral core: the
ASGI request check in front of a server's routes (`asgi`) and where the default models come
from (`models`). Nothing here imports an engine."""

"""The gateway: Wonder's REST + WebSocket API as a Ray Serve deployment with a FastAPI ingress."""

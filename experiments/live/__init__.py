"""Websocket transport: the consumers (authenticate, join, replay, forward), their routing, and `broadcast`, the
only module that knows group names and sends to them. No business logic, no writes."""

"""Fixtures several test folders share: servers and helpers that stand in for nothing of the
project's own, only for what a real deployment talks to (a Confluent-API schema registry)."""

"""Coordinators (groups, transactions): state machines persisted in internal topics."""

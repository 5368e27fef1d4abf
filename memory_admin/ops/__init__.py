"""Operator commands: a door above the domain layers (accounts, memory, derived, deletion)."""

"""The Weft SDK (its public surface arrives with the SDK issue)."""

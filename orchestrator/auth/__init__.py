"""Who may call the service and what they may do (README "Security").

`grants` is the rule (roles, and which RPC needs which), `keys` the API key
format and its keyed hash, `gate` what every call passes through: it finds the
caller's credential, checks the grant, applies the per-principal limits and
writes the audit lines.
"""

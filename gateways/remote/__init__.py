"""The remote-agent tool: gateways call remote A2A agents through it, and only through it.

Modules by concern: `settings` (the allowlist `ORRERY_A2A_REMOTE_AGENTS` and its bounds),
`transport` (the one door for outbound requests: origin, addresses, hop header, redirects, byte
cap), `cards` (fetch, validate, verify the JWS signatures, pin), `credentials` (the outbound
token: a file or an OAuth token endpoint, never the caller's), `client` (`RemoteAgents.call`:
the a2a-sdk client over JSON-RPC, bounded per principal), `screening` (what of a reply reaches
the agent), `errors` (reason codes), `metrics`, and `adk_tool` (the call as an ADK tool that
needs confirmation). docs/contract.md#outbound-calls is the contract.
"""

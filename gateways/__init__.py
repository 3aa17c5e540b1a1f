"""Agent gateways: implementations of the adapter's `AgentGateway` seam (`adapter/gateway.py`).

Each gateway reaches the adapter only through that seam; `remote` is the tool a gateway uses to
call remote A2A agents (allowlisted, guarded, screened).
"""

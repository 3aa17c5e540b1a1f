"""Gateways: implementations of the adapter's `AgentGateway` seam (`adapter/gateway.py`).

Each subpackage puts one kind of agent behind the edge and imports, of the adapter, only the seam
(`tests/test_layering.py`): the adapter never imports a gateway, it loads one by name
(`ORRERY_A2A_GATEWAY=module:factory`). `demo` is the default gateway; `remote` is the tool a
gateway calls remote A2A agents with (allowlisted, guarded, screened).
"""

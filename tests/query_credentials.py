"""Query strings that carry an access token (RFC 6750 §2.3), in every spelling a parser might
read as one, and look-alikes that carry none.

One table for both places that apply the rule (docs/contract.md#bearer-tokens): Envoy refuses
such a request on every route before anything else sees it, and authz refuses it again behind
any other proxy. Each refused query carries `SECRET`, so a test can prove no log line holds it.
"""

from __future__ import annotations

SECRET = "query-credential-4b1d"

# The query string after `?`, by what makes it a credential.
REFUSED: dict[str, str] = {
    "plain": f"access_token={SECRET}",
    "upper case": f"ACCESS_TOKEN={SECRET}",
    "mixed case": f"Access_Token={SECRET}",
    "escaped underscore": f"access%5Ftoken={SECRET}",
    "escaped underscore, lower hex": f"access%5ftoken={SECRET}",
    "escaped letters": f"%61%63cess_token={SECRET}",
    "after another parameter": f"A2A-Version=1.0&access_token={SECRET}",
    "repeated": f"access_token={SECRET}&access_token={SECRET}",
    "after a semicolon": f"x=1;access_token={SECRET}",
    "after an empty parameter": f"&access_token={SECRET}",
    "escaped equals sign": f"access_token%3D{SECRET}",
    "escaped ampersand": f"x=1%26access_token={SECRET}",
    "padded with escaped spaces": f"%20access_token%20={SECRET}",
    "no value": "access_token",
    "an empty value": "access_token=",
}

# Queries that carry no access token: served as usual.
ACCEPTED: dict[str, str] = {
    "the version parameter": "A2A-Version=1.0",
    "the name as a value": "q=access_token",
    "a longer name": "access_tokens=1",
    "a prefixed name": "my_access_token=1",
    "escaped twice": "access%255Ftoken=1",
}

# A fragment (`#…`) is never part of a request target; a client that sends one anyway.
FRAGMENTS: dict[str, str] = {
    "a fragment": f"#access_token={SECRET}",
    "a fragment after a query": f"?x=1#access_token={SECRET}",
}

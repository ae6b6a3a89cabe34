"""Security: listeners' protocols (TLS, SASL), credentials, ACLs.

Nothing here is imported by a broker whose listeners are all PLAINTEXT and which has no
authorizer: start-up and the plaintext hot paths do not pay for it.
"""

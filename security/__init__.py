"""Security: TLS contexts, SASL server mechanisms and SCRAM credentials (design.md section 6b).

This package never imports ``broker``: it takes plain config lookups and credential lookups and
gives back ``ssl.SSLContext`` objects, SASL exchanges and credential records.
"""

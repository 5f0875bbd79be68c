"""The headers of every HTML page the API serves (the dashboard and the API docs at /docs).

The pages load only this site's own scripts and styles — no inline script, nothing from another
origin (inline style attributes are allowed: they draw the dashboard's bars and Swagger UI's layout)
— may not be framed (a framed "Score session" button could be clicked by another site), and leak no
URLs.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

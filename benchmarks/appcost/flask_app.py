"""The Flask application of ``benchmarks/webapp.py``, served by gunicorn (``gunicorn.conf.py``).

It knows nothing of OpenTelemetry: gunicorn's ``post_fork`` sets the metrics up.
"""

from __future__ import annotations

from flask import Flask, jsonify, request

ITEMS = [
    {"id": i, "name": f"item {i}", "price": round(i * 1.25, 2), "tags": ["a", "b"]}
    for i in range(20)
]

app = Flask(__name__)


@app.get("/items")
def items() -> object:
    """The same document as fastapi_app.py's."""
    limit = request.args.get("limit", 20, type=int)
    return jsonify(count=min(limit, len(ITEMS)), items=ITEMS[:limit])

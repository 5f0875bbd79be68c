"""Flower as ``assay flower`` runs it: basic auth on every page, on its API and on its Prometheus
``/metrics``.

Flower 2.2 serves ``/metrics`` and ``/healthcheck`` without a login (their handlers lack
``@tornado.web.authenticated``). ``/metrics`` names every worker and task and counts them, so it gets
the login here; scrape it with basic auth. ``/healthcheck`` answers only ``OK`` and stays open, for
probes that carry no credentials.
"""

from __future__ import annotations


def require_login_for_metrics() -> None:
    """Put Flower's ``/metrics`` behind the login its pages have. Fails rather than let Flower start
    with the endpoint open if its route table no longer has it where expected."""
    import tornado.web
    from flower import urls
    from flower.views.monitor import Metrics

    for index, handler in enumerate(urls.handlers):
        # ``flower.app`` builds every Flower application from this same list object.
        if isinstance(handler, tuple) and handler[0] == r"/metrics" and issubclass(handler[1], Metrics):

            class LoggedInMetrics(handler[1]):  # type: ignore[misc, valid-type]
                @tornado.web.authenticated
                async def get(self) -> None:
                    await super().get()

            urls.handlers[index] = (r"/metrics", LoggedInMetrics)
            return
    raise RuntimeError("Flower's route table has no /metrics handler to put behind the login")

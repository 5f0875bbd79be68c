"""The judge's provider registry (ARCHITECTURE.md, invariant 9): the only place that speaks a
provider's SDK. A suite, a kind or a metric names a provider and a model; ``ProviderRegistry`` turns
the name into a ``Provider`` that sends one judge call and answers in one shape (``base.Answer``)."""

"""Online scoring: spans an application exports over OTLP (otlp, spans), sampled by the suites'
``online:`` rules into items and scores on the online queues (items, sampler), watched as rolling
windows (windows, gauges). See docs/online.md."""

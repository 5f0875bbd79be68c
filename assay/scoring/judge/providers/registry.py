"""The providers of ``config/models.yaml`` as ``Provider`` objects, built once per worker process."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from assay.scoring.judge.inflight import InFlight, InProcessInFlight, RedisInFlight
from assay.scoring.judge.providers.base import BatchAPI, Provider
from assay.scoring.judge.retry import SDK_IMPORT_LOCK
from assay.scoring.suites.loader import ModelCatalog
from assay.scoring.suites.providers import ProviderConfig

# What a local server that takes no key is sent (the SDK refuses to build a client without one).
NO_KEY = "no-key"


class ProviderRegistry:
    """The providers a process can call, and why each of the others cannot be called."""

    def __init__(self, providers: Mapping[str, Provider], missing: Mapping[str, str] | None = None) -> None:
        self._providers = dict(providers)
        self._missing = dict(missing or {})

    def get(self, name: str) -> Provider | None:
        return self._providers.get(name)

    def why_missing(self, name: str) -> str:
        return self._missing.get(name, f"judge provider {name!r} is not configured in config/models.yaml")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._providers.values())

    def __bool__(self) -> bool:
        return bool(self._providers)


def api_key_for(name: str, config: ProviderConfig, anthropic_key: str | None, env: Mapping[str, str]) -> str | None:
    """The provider's key: from ``api_key_env``, else Assay's Anthropic key (anthropic type), else the
    SDK's own variable (OPENAI_API_KEY); a server that takes no key gets a placeholder."""
    if config.api_key_env:
        key = env.get(config.api_key_env)
    elif config.type == "anthropic":
        key = anthropic_key
    else:
        key = env.get("OPENAI_API_KEY")
    if not key and not config.key_required:
        return NO_KEY
    return key or None


def _provider_module(provider_type: str):  # type: ignore[no-untyped-def]
    """The module that speaks ``provider_type``'s API, imported (with its SDK) only once a provider of
    that type is built, under the SDK import lock: a process without an Anthropic key never pays for
    the Anthropic SDK's import."""
    with SDK_IMPORT_LOCK:
        if provider_type == "anthropic":
            from assay.scoring.judge.providers import anthropic_messages as module
        else:
            from assay.scoring.judge.providers import openai_chat as module
    return module


def build_registry(
    catalog: ModelCatalog,
    *,
    anthropic_key: str | None,
    anthropic_base_url: str | None,
    in_flight: Callable[[str, int], InFlight],
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> ProviderRegistry:
    """Every provider of ``catalog`` that has what it needs to be called (its key)."""
    env = os.environ if env is None else env
    providers: dict[str, Provider] = {}
    missing: dict[str, str] = {}
    for name, config in catalog.providers.items():
        key = api_key_for(name, config, anthropic_key, env)
        if key is None:
            missing[name] = _no_key_reason(name, config)
            continue
        cap = in_flight(name, config.max_in_flight) if config.max_in_flight else None
        module = _provider_module(config.type)
        if config.type == "anthropic":
            client = module.make_client(key, config.base_url or anthropic_base_url, timeout)
            providers[name] = module.AnthropicProvider(name, client, cap)
        else:
            providers[name] = module.OpenAIProvider(name, config, module.make_client(key, config.base_url, timeout), cap)
    return ProviderRegistry(providers, missing)


def build_batch_apis(
    catalog: ModelCatalog,
    *,
    anthropic_key: str | None,
    anthropic_base_url: str | None,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> dict[str, BatchAPI]:
    """The batch API of every provider of ``catalog`` that has one (``batch: true``) and its key."""
    env = os.environ if env is None else env
    apis: dict[str, BatchAPI] = {}
    for name, config in catalog.providers.items():
        key = api_key_for(name, config, anthropic_key, env)
        if not config.has_batch_api or key is None:
            continue
        module = _provider_module(config.type)
        if config.type == "anthropic":
            client = module.make_batch_client(key, config.base_url or anthropic_base_url, timeout)
            apis[name] = module.AnthropicBatches(name, client)
        else:
            apis[name] = module.OpenAIBatches(name, config, module.make_batch_client(key, config.base_url, timeout))
    return apis


def configured_routes(catalog: ModelCatalog, env: Mapping[str, str] | None = None) -> list[str]:
    """The route of every priced model as the workers build it, without building a client (the
    dashboard lists them): the model's name for Anthropic, ``provider@host:model`` for the others,
    whose endpoint is ``base_url``, else the SDK's ``OPENAI_BASE_URL``, else the OpenAI API."""
    env = os.environ if env is None else env
    routes = []
    for name, model in sorted(catalog.models.items()):
        config = catalog.providers[model.provider]
        if config.type == "anthropic":
            routes.append(name)
        else:
            base_url = config.base_url or env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
            routes.append(f"{model.provider}@{urlsplit(base_url).netloc}:{name}")
    return routes


def _no_key_reason(name: str, config: ProviderConfig) -> str:
    if config.type == "anthropic" and not config.api_key_env:
        return "no Anthropic API key is configured: the judge was not run"  # as it always read
    variable = config.api_key_env or "OPENAI_API_KEY"
    return f"no API key for judge provider {name!r} is configured (set {variable}): the judge was not run"


def redis_in_flight(client: object, key_prefix: str) -> Callable[[str, int], InFlight]:
    return lambda name, limit: RedisInFlight(client, key_prefix, name, limit)  # type: ignore[arg-type]


def in_process_in_flight() -> Callable[[str, int], InFlight]:
    return lambda name, limit: InProcessInFlight(limit)

"""The retry policy: ``is_transient`` on real SDK exceptions obtained from the fake, and the waits."""

from __future__ import annotations

import email.utils
import socket
import time

import anthropic
import httpx2
import pytest

from assay.scoring.judge.breaker import BreakerOpen
from assay.scoring.judge.loop import judge_loop
from assay.scoring.judge.retry import RetryPolicy, is_transient, retry_after_seconds, retrying
from tests.scoring.judge.conftest import MODEL


def sdk_error(client: anthropic.Anthropic, fake, behaviour: dict, timeout: float = 5.0) -> anthropic.APIError:
    fake.script(behaviour)
    with pytest.raises(anthropic.APIError) as caught:
        client.messages.create(model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "x"}], timeout=timeout)
    return caught.value


@pytest.mark.parametrize(
    ("behaviour", "error_class", "transient"),
    [
        ({"kind": "rate_limit"}, anthropic.RateLimitError, True),
        ({"kind": "spend_limit"}, anthropic.EnforcedSpendLimitReachedError, False),
        ({"kind": "overloaded"}, anthropic.OverloadedError, True),
        ({"kind": "server_error"}, anthropic.InternalServerError, True),
        ({"kind": "error", "status": 502}, anthropic.InternalServerError, True),
        ({"kind": "error", "status": 503}, anthropic.ServiceUnavailableError, True),
        ({"kind": "error", "status": 408}, anthropic.RequestTimeoutError, True),
        ({"kind": "bad_request"}, anthropic.BadRequestError, False),
        ({"kind": "unauthorized"}, anthropic.AuthenticationError, False),
        ({"kind": "error", "status": 403}, anthropic.PermissionDeniedError, False),
        ({"kind": "error", "status": 404}, anthropic.NotFoundError, False),
        ({"kind": "error", "status": 413}, anthropic.ContentTooLargeError, False),
        ({"kind": "error", "status": 422}, anthropic.UnprocessableEntityError, False),
    ],
    ids=lambda v: v.get("kind") + str(v.get("status", "")) if isinstance(v, dict) else "",
)
def test_is_transient_on_status_errors(client, fake, behaviour, error_class, transient):
    error = sdk_error(client, fake, behaviour)
    assert type(error) is error_class
    assert is_transient(error) is transient


def test_a_429_whose_message_names_the_spend_limit_is_not_transient(client, fake):
    # A proxy in front of the API may pass the message on without the machine-readable error code.
    error = sdk_error(client, fake, {"kind": "rate_limit", "message": "Spend limit reached for this workspace."})
    assert type(error) is anthropic.RateLimitError and error.error_code is None
    assert is_transient(error) is False


def test_timeouts_and_connection_errors_are_transient(client, fake):
    timeout = sdk_error(client, fake, {"kind": "hang"}, timeout=0.2)
    assert isinstance(timeout, anthropic.APITimeoutError)
    assert is_transient(timeout)

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with anthropic.Anthropic(api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0) as closed:
        with pytest.raises(anthropic.APIConnectionError) as caught:
            closed.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert type(caught.value) is anthropic.APIConnectionError
    assert is_transient(caught.value)


def test_error_event_in_a_stream_is_judged_by_its_type():
    # How the SDK reports an ``event: error`` after a 200 started the stream.
    response = httpx2.Response(200, request=httpx2.Request("POST", "http://127.0.0.1/v1/messages"))
    overloaded = anthropic.APIStatusError(
        "overloaded",
        response=response,
        body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    invalid = anthropic.APIStatusError(
        "bad", response=response, body={"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    )
    assert is_transient(overloaded) and not is_transient(invalid)


def test_non_api_errors_are_never_transient():
    assert not is_transient(ValueError("a bug"))
    assert not is_transient(BreakerOpen("m", 3.0))


def test_retry_after_header_forms():
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after": "0.25"}) == 0.25
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8 <= retry_after_seconds({"retry-after": in_ten}) <= 10
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_doubles_with_bounded_jitter():
    policy = RetryPolicy(backoff_base_seconds=1.0, jitter_ratio=0.5)
    for retry, step in ((1, 1.0), (2, 2.0), (3, 4.0)):
        waits = [policy.backoff(retry) for _ in range(200)]
        assert all(step <= w <= step * 1.5 for w in waits)
        assert max(waits) > min(waits)  # there is jitter


def send_through(controller, client: anthropic.AsyncAnthropic):
    async def send():
        async for attempt in controller:
            with attempt:
                result = await client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}])
        return result

    return judge_loop().run(send())


class Sleeps(list):
    """Records the waits a controller asks for, without waiting."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_retrying_backs_off_three_times_then_gives_up(judge_client, fake):
    fake.script({"kind": "overloaded", "times": 10})
    sleeps = Sleeps()
    controller = retrying(RetryPolicy(backoff_base_seconds=1.0, jitter_ratio=0.0), sleep=sleeps)
    with pytest.raises(anthropic.OverloadedError):
        send_through(controller, judge_client)
    assert sleeps == [1.0, 2.0, 4.0]
    assert fake.calls()["total"] == 4


def test_retrying_honours_retry_after_and_stops_on_permanent_errors(judge_client, fake):
    fake.script({"kind": "rate_limit", "retry_after": 3}, {"kind": "unauthorized"})
    sleeps = Sleeps()
    controller = retrying(RetryPolicy(backoff_base_seconds=0.01), sleep=sleeps)
    with pytest.raises(anthropic.AuthenticationError):
        send_through(controller, judge_client)
    assert sleeps == [3.0]
    assert fake.calls()["total"] == 2


def test_retrying_will_not_block_longer_than_the_inline_limit(judge_client, fake):
    fake.script({"kind": "rate_limit", "retry_after": 120}, {"kind": "ok"})
    sleeps = Sleeps()
    controller = retrying(RetryPolicy(max_inline_wait_seconds=30), sleep=sleeps)
    with pytest.raises(anthropic.RateLimitError):
        send_through(controller, judge_client)
    assert sleeps == []
    assert fake.calls()["total"] == 1

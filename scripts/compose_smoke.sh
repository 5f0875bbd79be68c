#!/usr/bin/env bash
# Smoke test of docker-compose.yml: build, bring the whole stack up, score batches, tear it down.
#
#   scripts/compose_smoke.sh            # docker compose, or podman-compose when only podman is installed
#
# Steps: build the images; start the stack with worker-judge scaled to SMOKE_JUDGE_WORKERS containers
# (own project name, random secrets, free host ports on 127.0.0.1) and count the running judge
# containers; wait for /readyz; upload examples/kql_items.jsonl with the configured API key and wait for
# the batch to complete; check the API's /metrics and each worker container's exporter; run every
# container's healthcheck; check Flower, through its published port on 127.0.0.1, lists every worker
# container under its own node name (SERVICE@its hostname) on its queues; upload a larger generated
# batch, kill the worker-metrics container mid-batch, and check the batch still completes with every
# item scored exactly once (psql in the postgres container). Everything is torn down at the end, on
# failure too: containers, network, volumes and the images it built. It talks to 127.0.0.1 only.
#
# Needs a container engine and the base images (a registry, or scripts/standin-images/build.sh).
# Not part of the test suite. Exit status 0 only when every step passed.
#
# Knobs (environment): SMOKE_JUDGE_WORKERS (worker-judge containers, default 2), SMOKE_ITEMS (items in the
# kill test, default 400), SMOKE_TIMEOUT (seconds to wait for each batch, default 900), SMOKE_KEEP=1
# (leave the stack up, for a look after a failure), SMOKE_PROJECT (compose project name, default
# assay-smoke).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PROJECT="${SMOKE_PROJECT:-assay-smoke}"
ITEMS="${SMOKE_ITEMS:-400}"
TIMEOUT="${SMOKE_TIMEOUT:-900}"
JUDGE_WORKERS="${SMOKE_JUDGE_WORKERS:-2}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/assay-smoke.XXXXXX")"
STARTED=$SECONDS
STEP_STARTED=$SECONDS
STEP=""

step() {
  if [ -n "$STEP" ]; then printf '   ok (%ss)\n' "$((SECONDS - STEP_STARTED))"; fi
  STEP="$*"
  STEP_STARTED=$SECONDS
  printf '\n== [%4ss] %s\n' "$((SECONDS - STARTED))" "$*"
}
info() { printf '   %s\n' "$*"; }
fail() {
  printf '\nFAIL: %s: %s\n' "${STEP:-setup}" "$*" >&2
  exit 1
}

# --- the engine ---------------------------------------------------------------------------------------
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  ENGINE=docker
  if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose); else COMPOSE=(docker-compose); fi
elif command -v podman >/dev/null 2>&1; then
  ENGINE=podman
  if command -v podman-compose >/dev/null 2>&1; then
    COMPOSE=(podman-compose)
    # podman-compose before 1.4 accepts `up --scale` and silently starts one container per service.
    pc_version="$(podman-compose --version 2>/dev/null | sed -n 's/^podman-compose version \([0-9][0-9.]*\).*/\1/p' | head -n1)"
    python3 -c 'import sys; v = tuple(int(p) for p in sys.argv[1].split(".")[:2]); sys.exit(v < (1, 4))' "${pc_version:-0}" \
      || fail "podman-compose ${pc_version:-of unknown version} ignores --scale (it needs 1.4 or newer): pip install 'podman-compose>=1.4'"
  elif podman compose version >/dev/null 2>&1; then
    COMPOSE=(podman compose)
  else
    fail "podman is installed but neither podman-compose nor 'podman compose' is (pip install podman-compose)"
  fi
else
  fail "no container engine: install Docker (with compose) or podman (with podman-compose)"
fi
command -v curl >/dev/null 2>&1 || fail "curl is needed"
command -v python3 >/dev/null 2>&1 || fail "python3 is needed (JSON parsing)"
[[ "$JUDGE_WORKERS" =~ ^[1-9][0-9]?$ ]] || fail "SMOKE_JUDGE_WORKERS must be a number from 1 to 99, not '$JUDGE_WORKERS'"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
random_text() { python3 -c 'import secrets; print(secrets.token_hex(24))'; }

# --- configuration: random secrets, free ports, no .env from the checkout -----------------------------
export POSTGRES_PASSWORD="smoke$(random_text)"
API_KEY="smoke-$(random_text)"
export ASSAY_API_KEYS="[\"smoke:${API_KEY}\"]"
export ASSAY_FLOWER_USER=smoke
export ASSAY_FLOWER_PASSWORD="$(random_text)"
export ANTHROPIC_API_KEY=""  # no judge: judge components are skipped, scores partial
API_PORT="${SMOKE_API_PORT:-$(free_port)}"
export ASSAY_FLOWER_HOST_PORT="${SMOKE_FLOWER_PORT:-$(free_port)}"
# The API is published on the host's loopback only (compose's HOST_IP:PORT form): this test stack has a
# throwaway key and talks to nothing else.
export ASSAY_API_HOST_PORT="127.0.0.1:${API_PORT}"
API="http://127.0.0.1:${API_PORT}"
FLOWER="http://127.0.0.1:${ASSAY_FLOWER_HOST_PORT}"

compose() { (cd "$REPO" && "${COMPOSE[@]}" -p "$PROJECT" -f docker-compose.yml "$@"); }

# The containers of a service, by the labels both compose implementations set (extra ps arguments,
# e.g. a status filter, come after the service).
containers_of() {
  local svc="$1"
  shift
  "$ENGINE" ps -a -q --filter "label=com.docker.compose.project=${PROJECT}" \
    --filter "label=com.docker.compose.service=${svc}" "$@"
}
container_of() { containers_of "$1" | head -n1; }

# The images this run built and tagged: PROJECT_SERVICE (podman-compose) or PROJECT-SERVICE (Docker).
project_images() {
  "$ENGINE" images --format '{{.Repository}}:{{.Tag}}' | grep -E "^(localhost/)?${PROJECT}[_-][a-z-]+:" || true
}
remove_project_images() {
  local images
  mapfile -t images < <(project_images)
  # podman's rmi takes the build's untagged intermediate images with them; Docker keeps only its
  # BuildKit cache (docker builder prune clears it).
  [ "${#images[@]}" -eq 0 ] || "$ENGINE" rmi -f "${images[@]}" >/dev/null 2>&1 || true
}

cleanup() {
  status=$?
  trap - EXIT INT TERM
  if [ "$status" -ne 0 ]; then
    printf '\n== logs (last 40 lines per service) after the failure\n' >&2
    for svc in postgres redis migrate api worker-judge worker-metrics beat flower; do
      for id in $(containers_of "$svc" 2>/dev/null || true); do
        printf -- '--- %s (%s)\n' "$svc" "$id" >&2
        "$ENGINE" logs --tail 40 "$id" >&2 2>&1 || true
      done
    done
  fi
  if [ "${SMOKE_KEEP:-0}" = 1 ]; then
    printf '\nSMOKE_KEEP=1: the stack is still up (project %s); remove it with:\n  cd %s && %s -p %s down -v\n' \
      "$PROJECT" "$REPO" "${COMPOSE[*]}" "$PROJECT"
  else
    printf '\n== [%4ss] tear down (containers, network, volumes, images)\n' "$((SECONDS - STARTED))"
    compose down -v --remove-orphans >/dev/null 2>&1 || compose down -v >/dev/null 2>&1 || true
    remove_project_images
    left="$("$ENGINE" ps -a -q --filter "label=com.docker.compose.project=${PROJECT}" | wc -l)"
    vols="$("$ENGINE" volume ls -q | grep -c "^${PROJECT}[_-]" || true)"
    nets="$("$ENGINE" network ls --format '{{.Name}}' | grep -c "^${PROJECT}[_-]" || true)"
    imgs="$(project_images | wc -l)"
    printf '   containers left: %s, volumes left: %s, networks left: %s, images left: %s\n' "$left" "$vols" "$nets" "$imgs"
  fi
  rm -rf "$WORK"
  if [ "$status" -eq 0 ]; then
    printf '\nPASS: compose smoke test in %ss (%s)\n' "$((SECONDS - STARTED))" "${COMPOSE[*]}"
  else
    printf '\nFAIL after %ss (exit %s)\n' "$((SECONDS - STARTED))" "$status" >&2
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- helpers over the API -----------------------------------------------------------------------------
api() { curl -sS --max-time 30 -H "Authorization: Bearer ${API_KEY}" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }

upload() {  # upload FILE -> prints the batch id
  local body
  body="$(api -X POST -H 'Content-Type: application/x-ndjson' --data-binary "@$1" "${API}/api/v1/batches?suite=kql")" \
    || fail "upload of $1 failed"
  printf '%s' "$body" | json 'd["batch_id"]' 2>/dev/null || fail "upload of $1: unexpected answer: $body"
}

batch_field() { api "${API}/api/v1/batches/$1" | json "$2"; }

wait_for_batch() {  # wait_for_batch ID [on_progress_command]
  local id="$1" deadline=$((SECONDS + TIMEOUT)) status progress last=""
  while :; do
    status="$(batch_field "$id" 'd["status"]' 2>/dev/null || echo unknown)"
    progress="$(batch_field "$id" '"%d/%d done" % (d["progress"]["done"], d["progress"]["total"]) if d.get("progress") else "-"' 2>/dev/null || echo '?')"
    if [ "$progress" != "$last" ]; then info "batch $id: $status, $progress"; last="$progress"; fi
    case "$status" in
      completed) return 0 ;;
      failed | cancelled | budget_exhausted) fail "batch $id ended $status" ;;
    esac
    [ "$SECONDS" -lt "$deadline" ] || fail "batch $id not completed after ${TIMEOUT}s ($status, $progress)"
    if [ $# -ge 2 ]; then "$2" "$id" || true; fi
    sleep 2
  done
}

# --- 1. build and start -------------------------------------------------------------------------------
step "engine: ${COMPOSE[*]} ($ENGINE); project $PROJECT; API on $API, Flower on $FLOWER"
compose down -v >/dev/null 2>&1 || true  # leftovers of an earlier, interrupted run

# Every app service builds the same Dockerfile. Some compose implementations (podman-compose) build
# them all at once, six identical pip installs side by side: build one service's image and tag it as
# each other's, so `up` finds them built.
APP_SERVICES=(migrate api worker-judge worker-metrics beat flower)
step "build the image (compose build migrate; tagged for ${APP_SERVICES[*]:1})"
compose build migrate >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; fail "build failed"; }
for sep in _ -; do
  if "$ENGINE" image inspect "${PROJECT}${sep}migrate" >/dev/null 2>&1; then
    for svc in "${APP_SERVICES[@]:1}"; do "$ENGINE" tag "${PROJECT}${sep}migrate" "${PROJECT}${sep}${svc}"; done
    break
  fi
done
info "$("$ENGINE" image inspect -f '{{.Size}}' "${PROJECT}_migrate" 2>/dev/null || "$ENGINE" image inspect -f '{{.Size}}' "${PROJECT}-migrate") bytes"

UP_ARGS=(up -d --scale "worker-judge=${JUDGE_WORKERS}")
if [ "${COMPOSE[0]}" = podman-compose ]; then
  # podman-compose turns depends_on into `podman run --requires`, and podman before 4.6 cannot start a
  # container whose requirements chain through an exited one-shot container (migrate): "depends on
  # container ... not found in input list". It also skips service_healthy conditions before podman 4.6.
  # --no-deps starts every service at once: the services wait for the database themselves.
  UP_ARGS+=(--no-deps)
fi
step "start the stack (${COMPOSE[*]} ${UP_ARGS[*]})"
compose "${UP_ARGS[@]}" >"$WORK/up.log" 2>&1 || { tail -n 40 "$WORK/up.log" >&2; fail "compose up failed"; }

step "count the running worker-judge containers (want ${JUDGE_WORKERS})"
deadline=$((SECONDS + 60))
while :; do
  running="$(containers_of worker-judge --filter status=running | wc -l)"
  [ "$running" = "$JUDGE_WORKERS" ] && break
  [ "$SECONDS" -lt "$deadline" ] || fail "${running} worker-judge container(s) running, not ${JUDGE_WORKERS}: ${COMPOSE[*]} did not honour --scale"
  sleep 2
done
info "${running} worker-judge containers running"

step "wait for ${API}/readyz"
deadline=$((SECONDS + 300))
until curl -fsS --max-time 5 "${API}/readyz" >/dev/null 2>&1; do
  [ "$SECONDS" -lt "$deadline" ] || fail "/readyz did not answer 200 within 300s"
  sleep 2
done
info "$(curl -sS "${API}/readyz")"
published="$("$ENGINE" port "$(container_of api)" 8000 || true)"
if printf '%s\n' "$published" | grep -vq '^127\.0\.0\.1:'; then fail "the API is published beyond the host's loopback: $published"; fi

# --- 2. the example batch -----------------------------------------------------------------------------
step "upload examples/kql_items.jsonl through the API (suite kql)"
api -o /dev/null -w '%{http_code}' "${API}/api/v1/batches" | grep -qx 200 || fail "the API refuses the configured key"
[ "$(curl -sS -o /dev/null -w '%{http_code}' "${API}/api/v1/batches")" = 401 ] || fail "the API answers without a key"
BATCH1="$(upload "$REPO/examples/kql_items.jsonl")"
info "batch $BATCH1"

step "wait for batch $BATCH1 to complete"
wait_for_batch "$BATCH1"
info "summary: $(batch_field "$BATCH1" 'json.dumps(d["progress"])' 2>/dev/null || batch_field "$BATCH1" 'd["progress"]')"

# --- 3. metrics ---------------------------------------------------------------------------------------
step "check the API's /metrics and each worker's exporter"
api "${API}/metrics" >"$WORK/metrics.txt" || fail "GET /metrics failed"
for metric in assay_queue_depth assay_metrics_source_up; do
  grep -q "^${metric}" "$WORK/metrics.txt" || fail "/metrics has no ${metric}"
done
info "/metrics: $(grep -c '^assay_' "$WORK/metrics.txt") assay_ samples"
[ "$(curl -sS -o /dev/null -w '%{http_code}' "${API}/metrics")" = 401 ] || fail "/metrics answers without a key"
scored=0
for svc in worker-judge worker-metrics; do
  ids="$(containers_of "$svc")"
  [ -n "$ids" ] || fail "no $svc container"
  for id in $ids; do
    out="$("$ENGINE" exec "$id" python -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9100/metrics', timeout=5).read().decode())")" \
      || fail "$svc ($id): its exporter on :9100 does not answer"
    n="$(printf '%s\n' "$out" | awk '/^assay_items_scored_total/ {s += $2} END {printf "%d", s}')"
    info "$svc ($id): exporter up, assay_items_scored_total = $n"
    scored=$((scored + n))
  done
done
[ "$scored" -ge 4 ] || fail "the workers counted $scored scored items, expected at least 4"

step "run each container's own healthcheck command in it (workers ping their own node, SERVICE@\$(hostname))"
for svc in postgres redis api worker-judge worker-metrics; do
  for id in $(containers_of "$svc"); do
    test_json="$("$ENGINE" inspect -f '{{json .Config.Healthcheck.Test}}' "$id")"
    mapfile -t cmd < <(printf '%s' "$test_json" | python3 -c '
import json, sys
t = json.load(sys.stdin) or []
print("\n".join(["sh", "-c", t[1]] if t and t[0] == "CMD-SHELL" else t[1:]))')
    [ "${#cmd[@]}" -gt 0 ] || fail "$svc has no healthcheck"
    "$ENGINE" exec "$id" "${cmd[@]}" >/dev/null 2>&1 || fail "$svc ($id): its healthcheck fails: $test_json"
    info "$svc ($id): healthy"
  done
done

# --- 4. Flower ----------------------------------------------------------------------------------------
step "check Flower through its published port (every worker container under its own node name, on its queues)"
# The node each worker container should have: SERVICE@its hostname (the compose file's --name SERVICE@%h).
: >"$WORK/nodes.txt"
for svc in worker-judge worker-metrics; do
  for id in $(containers_of "$svc" --filter status=running); do
    host="$("$ENGINE" exec "$id" hostname)" && [ -n "$host" ] || fail "$svc ($id): \`hostname\` gave no name"
    printf '%s@%s\n' "$svc" "$host" >>"$WORK/nodes.txt"
  done
done
[ "$(grep -c '^worker-judge@' "$WORK/nodes.txt")" = "$JUDGE_WORKERS" ] || fail "expected ${JUDGE_WORKERS} worker-judge nodes: $(cat "$WORK/nodes.txt")"
[ "$(sort -u "$WORK/nodes.txt" | wc -l)" = "$(wc -l <"$WORK/nodes.txt")" ] || fail "two worker containers share a node name: $(cat "$WORK/nodes.txt")"
published="$("$ENGINE" port "$(container_of flower)" 5555 || true)"
info "flower 5555/tcp published on: $(echo "$published" | tr '\n' ' ')"
printf '%s\n' "$published" | grep -q . || fail "Flower's port is not published"
if printf '%s\n' "$published" | grep -vq '^127\.0\.0\.1:'; then fail "Flower is published beyond the host's loopback: $published"; fi
[ "$(curl -sS -o /dev/null -w '%{http_code}' "${FLOWER}/api/workers")" = 401 ] || fail "Flower answers without basic auth"
deadline=$((SECONDS + 120))
while :; do
  if curl -fsS --max-time 30 -u "${ASSAY_FLOWER_USER}:${ASSAY_FLOWER_PASSWORD}" "${FLOWER}/api/workers?refresh=1" >"$WORK/workers.json" 2>"$WORK/flower.err" &&
    python3 - "$WORK/workers.json" "$WORK/nodes.txt" <<'PY'; then
import json, sys
queues_of = {"worker-judge": {"judge"}, "worker-metrics": {"metrics", "control"}}
want = {node: queues_of[node.split("@", 1)[0]] for node in open(sys.argv[2]).read().split()}
workers = json.load(open(sys.argv[1]))
ok = True
for node, queues in sorted(want.items()):
    got = {q["name"] for q in (workers.get(node) or {}).get("active_queues") or []}
    print(f"   {node}: queues {sorted(got) or 'none'}")
    ok &= got == queues
sys.exit(0 if ok else 1)
PY
    break
  fi
  [ "$SECONDS" -lt "$deadline" ] || fail "Flower does not list every worker node ($(tr '\n' ' ' <"$WORK/nodes.txt")) on its queues: $(head -c 400 "$WORK/workers.json" "$WORK/flower.err" 2>/dev/null)"
  sleep 5
done

# --- 5. a worker killed mid-batch ---------------------------------------------------------------------
step "generate $ITEMS items and upload them"
python3 - "$REPO/examples/kql_items.jsonl" "$WORK/large.jsonl" "$ITEMS" <<'PY'
import json, sys
source, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(line) for line in open(source) if line.strip()]
with open(target, "w") as out:
    for i in range(n):
        row = dict(rows[i % len(rows)], id=f"smoke-{i:05d}")
        out.write(json.dumps(row) + "\n")
PY
BATCH2="$(upload "$WORK/large.jsonl")"
info "batch $BATCH2 ($ITEMS items)"

KILLED=""
kill_mid_batch() {  # kill worker-metrics once some, not all, items are done
  [ -z "$KILLED" ] || return 0
  local done total
  done="$(batch_field "$1" 'd["progress"]["done"]')"
  total="$(batch_field "$1" 'd["progress"]["total"]')"
  if [ "$done" -gt 0 ] && [ "$done" -lt "$total" ]; then
    KILLED="$(container_of worker-metrics)"
    info "killing worker-metrics ($KILLED) with SIGKILL at $done/$total done"
    "$ENGINE" kill "$KILLED" >/dev/null
    # Its restart policy brings it back; start it by hand if this engine did not within 20 s.
    for _ in $(seq 1 10); do
      sleep 2
      [ "$("$ENGINE" inspect -f '{{.State.Running}}' "$KILLED")" = true ] && { info "worker-metrics restarted by its restart policy"; return 0; }
    done
    info "worker-metrics not restarted by the engine within 20s: starting it"
    "$ENGINE" start "$KILLED" >/dev/null
  fi
}

step "kill worker-metrics mid-batch; wait for batch $BATCH2 to complete"
wait_for_batch "$BATCH2" kill_mid_batch
[ -n "$KILLED" ] || fail "the batch finished before a worker could be killed: raise SMOKE_ITEMS"

step "check every item of batch $BATCH2 was scored exactly once (psql in the postgres container)"
PG="$(container_of postgres)"
counts="$("$ENGINE" exec "$PG" psql -U assay -d assay -At -F ' ' -c "
  SELECT count(*), count(DISTINCT item_id),
         count(*) FILTER (WHERE components_landed <> components_total),
         (SELECT count(*) FROM items i WHERE i.origin_batch_id = '${BATCH2}'),
         (SELECT count(*) FROM score_components c JOIN scores s2 ON s2.id = c.score_id
           WHERE s2.batch_id = '${BATCH2}' AND c.status IN ('pending', 'in_progress', 'deferred'))
  FROM scores WHERE batch_id = '${BATCH2}'")" || fail "psql failed"
read -r n_scores n_items n_unlanded n_uploaded n_open <<<"$counts"
info "scores: $n_scores, distinct items scored: $n_items, items uploaded: $n_uploaded, scores with unlanded components: $n_unlanded, unfinished components: $n_open"
[ "$n_scores" = "$ITEMS" ] && [ "$n_items" = "$ITEMS" ] && [ "$n_uploaded" = "$ITEMS" ] \
  || fail "expected $ITEMS items each with one score"
[ "$n_unlanded" = 0 ] || fail "$n_unlanded scores have unlanded components"
[ "$n_open" = 0 ] || fail "$n_open components are still unfinished"
step "all checks passed"

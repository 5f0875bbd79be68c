#!/bin/sh
set -e
if [ "$1" = "redis-server" ]; then
  shift
  chown -R redis:redis /data
  exec setpriv --reuid=redis --regid=redis --init-groups redis-server --protected-mode no --bind 0.0.0.0 --dir /data "$@"
fi
exec "$@"

#!/bin/sh
# The stand-in's entrypoint: what FalkorDB's build/docker/run.sh does without TLS and without
# the browser (the real image's contract compose.yaml relies on). REDIS_ARGS and FALKORDB_ARGS
# are expanded unquoted, so split at blanks with quotes kept; the image's CMD is not used.
[ -d "$FALKORDB_DATA_PATH" ] || mkdir "$FALKORDB_DATA_PATH"
# shellcheck disable=SC2086
exec redis-server ${REDIS_ARGS} --protected-mode no --dir "$FALKORDB_DATA_PATH" \
    --loadmodule "$FALKORDB_BIN_PATH/falkordb.so" ${FALKORDB_ARGS}

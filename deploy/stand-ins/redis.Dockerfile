# Test stand-in for redis:7.4.1-alpine (deploy/local-images; users pull the real one).
# Debian's redis-server (7.0) and redis-cli; as in the official image the server runs as the
# user redis in /data (its working directory, where compose.yaml's volume and the AOF go).
FROM zapomni-stand-in/bookworm:minbase
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir /data && chown redis:redis /data
VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]

# Test stand-in for prom/prometheus:v3.1.0 (deploy/local-images; users pull the real one).
# Debian's prometheus (2.42) at the real image's paths (prometheus/prometheus's Dockerfile):
# /bin/prometheus as the entrypoint, the configuration in /etc/prometheus/prometheus.yml, the
# data in /prometheus (owned by nobody, who runs it); wget for compose.yaml's healthcheck, as
# the real image's busybox has it.
FROM zapomni-stand-in/bookworm:minbase
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus && chown -R nobody:nogroup /etc/prometheus /prometheus
USER nobody
EXPOSE 9090
VOLUME ["/prometheus"]
WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]

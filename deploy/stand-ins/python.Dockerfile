# Test stand-in for python:3.11.7-slim-bookworm (deploy/local-images; users pull the real one).
# Debian's python3.11 (3.11.2) where the real image builds 3.11.7 into /usr/local: the same
# runtime packages (ca-certificates, netbase, tzdata), `python`/`python3` in /usr/local/bin
# first on PATH, LANG=C.UTF-8 and CMD python3, as docker-library/python's
# 3.11/slim-bookworm/Dockerfile sets them; python3.11-venv for `python -m venv` (the real
# image's ensurepip). One addition: it trusts the certificate authorities this host trusts
# (host-cas.crt, copied in by deploy/local-images), so that pip reaches PyPI through a proxy
# that re-signs TLS, as on the test machines; Debian's pip reads the system's bundle.
FROM zapomni-stand-in/bookworm:minbase
COPY host-cas.crt /usr/local/share/ca-certificates/host-cas.crt
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
       netbase tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s /usr/bin/python3.11 /usr/local/bin/python3 \
    && ln -s python3 /usr/local/bin/python
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
CMD ["python3"]

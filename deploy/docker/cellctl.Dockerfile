# cellctl, static, on an empty image. docker-compose.yml's client service
# runs `cellprobe idle` in it, to be entered with
# `docker-compose exec client cellctl ...`.
FROM scratch
COPY bin/cellctl bin/cellprobe /bin/
COPY tmp /tmp
ENV PATH=/bin
ENTRYPOINT ["/bin/cellctl"]

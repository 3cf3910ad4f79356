# cellserver, static, on an empty image. Built by `make images` with the
# staging directory build/images as context (bin/: the static binaries,
# tmp/: an empty directory), so nothing else of the repository is sent.
FROM scratch
COPY bin/cellserver bin/cellprobe /bin/
COPY tmp /tmp
ENV PATH=/bin CELL_DATA_DIR=/data
# RPC, one-sided reads (tcp responder), metrics and pprof, raft.
EXPOSE 7070 7071 7072 7073
ENTRYPOINT ["/bin/cellserver"]

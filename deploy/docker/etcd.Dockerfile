# etcd (cmd/celletcd: etcd's own main from the server module pinned in
# go.mod), static, on an empty image, with cellprobe as its health check.
FROM scratch
COPY bin/celletcd bin/cellprobe /bin/
COPY tmp /tmp
ENV PATH=/bin
EXPOSE 2379 2380
ENTRYPOINT ["/bin/celletcd"]

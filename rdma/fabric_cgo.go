//go:build libfabric && cgo

package rdma

// The libfabric calls of the fabric provider. libfabric's data path is
// static inline functions in its headers, so each call Go makes is a small
// C function here; the ones on the read path take a batch (post n reads,
// reap n completions) so that a cgo call (about 55 ns) is paid per batch.
// Contexts handed to libfabric are C memory (struct fi_context2, as
// providers with FI_CONTEXT or FI_CONTEXT2 in their mode need): Go keeps
// no pointer of its own in C, and C none of Go's.

/*
#cgo LDFLAGS: -lfabric
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

typedef struct {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int cq_wait;
	uint64_t mr_mode;
	size_t key_size;
	int data_progress;
	size_t tx_size, rx_size, inject_size, rma_iov_limit;
	size_t addrlen;
	char addr[256];
	char prov[64];
	char straddr[256];
	char where[64];
} cell_fab;

static void cell_fab_close(cell_fab *f) {
	if (f->ep) fi_close(&f->ep->fid);
	if (f->cq) fi_close(&f->cq->fid);
	if (f->av) fi_close(&f->av->fid);
	if (f->domain) fi_close(&f->domain->fid);
	if (f->fabric) fi_close(&f->fabric->fid);
	if (f->info) fi_freeinfo(f->info);
	memset(f, 0, sizeof *f);
}

// cell_fab_open opens an RDM endpoint of provider prov, bound to node and
// service when given, with an address vector and one completion queue
// (with a wait object if the provider has one). On failure it returns the
// negative libfabric error and names the call in f->where.
static int cell_fab_open(cell_fab *f, const char *prov, const char *node, const char *service, int auto_progress, int msg_size) {
	memset(f, 0, sizeof *f);
	struct fi_info *hints = fi_allocinfo();
	if (!hints) return -FI_ENOMEM;
	hints->caps = FI_RMA | FI_READ | FI_REMOTE_READ | FI_MSG | FI_SEND | FI_RECV;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	hints->domain_attr->data_progress = auto_progress ? FI_PROGRESS_AUTO : FI_PROGRESS_UNSPEC;
	if (auto_progress) {
		// tcp;ofi_rxm runs its progress thread for endpoints with atomics.
		hints->caps |= FI_ATOMIC;
	}
	hints->fabric_attr->prov_name = strdup(prov);
	uint64_t flags = (node || service) ? FI_SOURCE : 0;
	int rc = fi_getinfo(FI_VERSION(1, 9), node, service, flags, hints, &f->info);
	if (rc && auto_progress) {
		// No progress thread: ask again without it (the caller polls).
		hints->caps &= ~FI_ATOMIC;
		hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
		rc = fi_getinfo(FI_VERSION(1, 9), node, service, flags, hints, &f->info);
	}
	fi_freeinfo(hints);
	if (rc) { strcpy(f->where, "fi_getinfo"); return rc; }
	struct fi_info *i = f->info;
	f->mr_mode = i->domain_attr->mr_mode;
	f->key_size = i->domain_attr->mr_key_size;
	f->data_progress = i->domain_attr->data_progress;
	f->tx_size = i->tx_attr->size;
	f->rx_size = i->rx_attr->size;
	f->inject_size = i->tx_attr->inject_size;
	f->rma_iov_limit = i->tx_attr->rma_iov_limit;
	snprintf(f->prov, sizeof f->prov, "%s", i->fabric_attr->prov_name);
	if ((rc = fi_fabric(i->fabric_attr, &f->fabric, NULL))) { strcpy(f->where, "fi_fabric"); goto fail; }
	if ((rc = fi_domain(f->fabric, i, &f->domain, NULL))) { strcpy(f->where, "fi_domain"); goto fail; }
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	if ((rc = fi_av_open(f->domain, &aa, &f->av, NULL))) { strcpy(f->where, "fi_av_open"); goto fail; }
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_MSG, .size = f->tx_size + f->rx_size, .wait_obj = FI_WAIT_UNSPEC };
	f->cq_wait = 1;
	if (fi_cq_open(f->domain, &ca, &f->cq, NULL)) {
		ca.wait_obj = FI_WAIT_NONE;
		f->cq_wait = 0;
		if ((rc = fi_cq_open(f->domain, &ca, &f->cq, NULL))) { strcpy(f->where, "fi_cq_open"); goto fail; }
	}
	if ((rc = fi_endpoint(f->domain, i, &f->ep, NULL))) { strcpy(f->where, "fi_endpoint"); goto fail; }
	if ((rc = fi_ep_bind(f->ep, &f->av->fid, 0))) { strcpy(f->where, "fi_ep_bind(av)"); goto fail; }
	if ((rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV))) { strcpy(f->where, "fi_ep_bind(cq)"); goto fail; }
	if ((rc = fi_enable(f->ep))) { strcpy(f->where, "fi_enable"); goto fail; }
	f->addrlen = sizeof f->addr;
	if ((rc = fi_getname(&f->ep->fid, f->addr, &f->addrlen))) { strcpy(f->where, "fi_getname"); goto fail; }
	size_t sl = sizeof f->straddr;
	fi_av_straddr(f->av, f->addr, f->straddr, &sl);
	return 0;
fail:
	cell_fab_close(f);
	return rc;
}

// cell_mr_reg registers [addr, addr+len) with access, asking for key
// (ignored under FI_MR_PROV_KEY), and enables it on the endpoint under
// FI_MR_ENDPOINT.
static int cell_mr_reg(cell_fab *f, void *addr, size_t len, uint64_t access, uint64_t key, struct fid_mr **mr, uint64_t *outkey, void **desc) {
	int rc = fi_mr_reg(f->domain, addr, len, access, 0, key, 0, mr, NULL);
	if (rc) return rc;
	if (f->mr_mode & FI_MR_ENDPOINT) {
		if ((rc = fi_mr_bind(*mr, &f->ep->fid, 0)) || (rc = fi_mr_enable(*mr))) {
			fi_close(&(*mr)->fid);
			*mr = NULL;
			return rc;
		}
	}
	*outkey = fi_mr_key(*mr);
	*desc = fi_mr_desc(*mr);
	return 0;
}

static int cell_mr_close(struct fid_mr *mr) { return fi_close(&mr->fid); }

#define CELL_MAX_RMA 4

// cell_rd is one read: len bytes into buf, from the nrma remote ranges in
// order (their lengths add up to len).
typedef struct {
	void *buf;
	void *desc;
	uint64_t len;
	uint64_t dest;
	void *ctx;
	int nrma;
	struct fi_rma_iov rma[CELL_MAX_RMA];
} cell_rd;

// cell_post_reads posts n reads in order, each but the last with FI_MORE.
// It returns how many were posted in the high 32 bits, and in the low 32
// bits 0 or the error of the first read not posted (-FI_EAGAIN when the
// queue is full).
static int64_t cell_post_reads(cell_fab *f, cell_rd *r, int n) {
	for (int k = 0; k < n; k++) {
		struct iovec iov = { .iov_base = r[k].buf, .iov_len = r[k].len };
		void *desc = r[k].desc;
		struct fi_msg_rma msg = {
			.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = r[k].dest,
			.rma_iov = r[k].rma, .rma_iov_count = r[k].nrma, .context = r[k].ctx,
		};
		ssize_t rc = fi_readmsg(f->ep, &msg, FI_COMPLETION | (k < n - 1 ? FI_MORE : 0));
		if (rc) return ((int64_t)k << 32) | (uint32_t)(int32_t)rc;
	}
	return (int64_t)n << 32;
}

typedef struct {
	void *ctx;
	int err;
	int prov_errno;
	uint64_t len;
} cell_cqe;

// cell_reap takes up to n completions; an error completion ends the batch
// (its entry has err set). It returns how many, or a negative error.
static int cell_reap(cell_fab *f, cell_cqe *e, int n, int timeout_ms) {
	struct fi_cq_msg_entry ent[64];
	if (n > 64) n = 64;
	ssize_t got = timeout_ms > 0 && f->cq_wait
		? fi_cq_sread(f->cq, ent, n, NULL, timeout_ms)
		: fi_cq_read(f->cq, ent, n);
	if (got == -FI_EAGAIN) return 0;
	if (got == -FI_EAVAIL) {
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof ee);
		ssize_t rc = fi_cq_readerr(f->cq, &ee, 0);
		if (rc == -FI_EAGAIN) return 0;
		if (rc < 0) return (int)rc;
		e[0].ctx = ee.op_context;
		e[0].err = ee.err ? ee.err : FI_EOTHER;
		e[0].prov_errno = ee.prov_errno;
		e[0].len = 0;
		return 1;
	}
	if (got < 0) return (int)got;
	for (ssize_t k = 0; k < got; k++) {
		e[k].ctx = ent[k].op_context;
		e[k].err = 0;
		e[k].prov_errno = 0;
		e[k].len = ent[k].len;
	}
	return (int)got;
}

static int cell_av_insert(cell_fab *f, const void *addr, uint64_t *out) {
	fi_addr_t a = FI_ADDR_NOTAVAIL;
	int n = fi_av_insert(f->av, addr, 1, &a, 0, NULL);
	if (n != 1) return n < 0 ? n : -FI_EADDRNOTAVAIL;
	*out = a;
	return 0;
}

static int cell_av_remove(cell_fab *f, uint64_t a) {
	fi_addr_t x = a;
	return fi_av_remove(f->av, &x, 1, 0);
}

static int cell_post_recv(cell_fab *f, void *buf, size_t len, void *desc, void *ctx) {
	return (int)fi_recv(f->ep, buf, len, desc, FI_ADDR_UNSPEC, ctx);
}

static int cell_send(cell_fab *f, void *buf, size_t len, void *desc, uint64_t dest, void *ctx) {
	return (int)fi_send(f->ep, buf, len, desc, dest, ctx);
}

static int cell_cq_signal(cell_fab *f) { return fi_cq_signal(f->cq); }

static void *cell_ctx_alloc(size_t n) { return calloc(n, sizeof(struct fi_context2)); }
static size_t cell_ctx_size(void) { return sizeof(struct fi_context2); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fabricEnd is one opened endpoint: fabric, domain, address vector,
// completion queue and RDM endpoint.
type fabricEnd struct {
	f *C.cell_fab // C memory: libfabric keeps pointers into it
}

// fabricError is a libfabric error code (negative return, or a completion
// error's err).
type fabricError struct {
	where string
	code  int // positive FI_E* / errno
	prov  int // the provider's errno, if any
}

func (e *fabricError) Error() string {
	s := fmt.Sprintf("%s: %s", e.where, C.GoString(C.fi_strerror(C.int(e.code))))
	if e.prov != 0 {
		s += fmt.Sprintf(" (provider errno %d)", e.prov)
	}
	return s
}

func fabErr(where string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	code := int(rc)
	if code < 0 {
		code = -code
	}
	return &fabricError{where: where, code: code}
}

// errAgain is libfabric's EAGAIN (a full queue, or a connection not yet
// made).
const errAgain = -C.FI_EAGAIN

// openFabric opens an endpoint of the libfabric provider prov.
func openFabric(prov, node, service string, autoProgress bool) (*fabricEnd, error) {
	f := (*C.cell_fab)(C.calloc(1, C.size_t(unsafe.Sizeof(C.cell_fab{}))))
	if f == nil {
		return nil, fmt.Errorf("rdma: fabric: out of memory")
	}
	cprov := C.CString(prov)
	defer C.free(unsafe.Pointer(cprov))
	var cnode, cservice *C.char
	if node != "" {
		cnode = C.CString(node)
		defer C.free(unsafe.Pointer(cnode))
	}
	if service != "" {
		cservice = C.CString(service)
		defer C.free(unsafe.Pointer(cservice))
	}
	auto := C.int(0)
	if autoProgress {
		auto = 1
	}
	if rc := C.cell_fab_open(f, cprov, cnode, cservice, auto, 0); rc != 0 {
		err := fabErr(C.GoString(&f.where[0]), rc)
		C.free(unsafe.Pointer(f))
		return nil, err
	}
	return &fabricEnd{f: f}, nil
}

// close closes everything the endpoint opened. REQUIRES: no call on it is
// running or will run.
func (e *fabricEnd) close() {
	if e.f == nil {
		return
	}
	C.cell_fab_close(e.f)
	C.free(unsafe.Pointer(e.f))
	e.f = nil
}

func (e *fabricEnd) provider() string { return C.GoString(&e.f.prov[0]) }
func (e *fabricEnd) address() string  { return C.GoStringN(&e.f.addr[0], C.int(e.f.addrlen)) }
func (e *fabricEnd) straddr() string  { return C.GoString(&e.f.straddr[0]) }
func (e *fabricEnd) hasWait() bool    { return e.f.cq_wait != 0 }
func (e *fabricEnd) autoProgress() bool {
	return e.f.data_progress == C.FI_PROGRESS_AUTO
}
func (e *fabricEnd) txSize() int { return int(e.f.tx_size) }

// rmaIOVLimit is the most remote ranges one read may carry.
func (e *fabricEnd) rmaIOVLimit() int { return min(int(e.f.rma_iov_limit), maxRMA) }
func (e *fabricEnd) rxSize() int      { return int(e.f.rx_size) }

// mrMode flags Cell handles.
func (e *fabricEnd) virtAddr() bool { return e.f.mr_mode&C.FI_MR_VIRT_ADDR != 0 }
func (e *fabricEnd) provKey() bool  { return e.f.mr_mode&C.FI_MR_PROV_KEY != 0 }
func (e *fabricEnd) keySize() int   { return int(e.f.key_size) }

// mrModeString names the memory registration mode bits in force.
func (e *fabricEnd) mrModeString() string {
	names := []struct {
		bit  C.uint64_t
		name string
	}{{C.FI_MR_LOCAL, "local"}, {C.FI_MR_VIRT_ADDR, "virt-addr"}, {C.FI_MR_ALLOCATED, "allocated"},
		{C.FI_MR_PROV_KEY, "prov-key"}, {C.FI_MR_ENDPOINT, "endpoint"}}
	s := ""
	for _, n := range names {
		if e.f.mr_mode&n.bit != 0 {
			if s != "" {
				s += ","
			}
			s += n.name
		}
	}
	if s == "" {
		s = "none"
	}
	return s
}

// Access flags of registrations.
const (
	accessRemoteRead uint64 = C.FI_REMOTE_READ
	accessLocal      uint64 = C.FI_READ | C.FI_SEND | C.FI_RECV
)

// fabricMR is one memory registration.
type fabricMR struct {
	mr   *C.struct_fid_mr
	key  uint64
	desc unsafe.Pointer
}

// register registers mem with access; key is the key asked for (the
// provider's own under FI_MR_PROV_KEY). mem must not be Go memory that
// can move: the caller pins it (or it is a mapping).
func (e *fabricEnd) register(mem unsafe.Pointer, n int, access uint64, key uint64) (fabricMR, error) {
	var m fabricMR
	var outKey C.uint64_t
	var desc unsafe.Pointer
	rc := C.cell_mr_reg(e.f, mem, C.size_t(n), C.uint64_t(access), C.uint64_t(key), &m.mr, &outKey, &desc)
	if rc != 0 {
		return m, fabErr("fi_mr_reg", rc)
	}
	m.key = uint64(outKey)
	m.desc = desc
	return m, nil
}

// isKeyTaken reports whether err is fi_mr_reg's "key in use".
func isKeyTaken(err error) bool {
	fe, ok := err.(*fabricError)
	return ok && fe.code == C.FI_ENOKEY
}

func (m *fabricMR) close() error {
	if m.mr == nil {
		return nil
	}
	rc := C.cell_mr_close(m.mr)
	m.mr = nil
	return fabErr("fi_close(mr)", rc)
}

// fabricRead is one read to post: n bytes at raddr of the registration
// rkey of peer dest, into buf (C memory or a mapping).
type fabricRead = C.cell_rd

func makeRead(buf unsafe.Pointer, desc unsafe.Pointer, n int, dest uint64, raddr, rkey uint64, ctx unsafe.Pointer) fabricRead {
	r := fabricRead{buf: buf, desc: desc, len: C.uint64_t(n), dest: C.uint64_t(dest), ctx: ctx, nrma: 1}
	r.rma[0] = C.struct_fi_rma_iov{addr: C.uint64_t(raddr), len: C.size_t(n), key: C.uint64_t(rkey)}
	return r
}

// maxRMA is the most remote ranges one read can carry here.
const maxRMA = C.CELL_MAX_RMA

// addRange appends a remote range of n bytes to r (len grows by n).
// REQUIRES: r has fewer than maxRMA ranges.
func addRange(r *fabricRead, n int, raddr, rkey uint64) {
	r.rma[r.nrma] = C.struct_fi_rma_iov{addr: C.uint64_t(raddr), len: C.size_t(n), key: C.uint64_t(rkey)}
	r.nrma++
	r.len += C.uint64_t(n)
}

// postReads posts rs in order, in one batch. It returns how many were
// posted, and the error of the first that was not: errAgain when the
// queue is full or the connection is being made.
func (e *fabricEnd) postReads(rs []fabricRead) (int, C.int) {
	if len(rs) == 0 {
		return 0, 0
	}
	r := int64(C.cell_post_reads(e.f, &rs[0], C.int(len(rs))))
	return int(r >> 32), C.int(int32(uint32(r)))
}

// fabricCompletion is a completion taken from the queue.
type fabricCompletion = C.cell_cqe

// reap takes up to len(es) completions, waiting up to timeoutMS when the
// queue has a wait object and timeoutMS > 0. An error completion ends a
// batch.
func (e *fabricEnd) reap(es []fabricCompletion, timeoutMS int) (int, error) {
	n := C.cell_reap(e.f, &es[0], C.int(len(es)), C.int(timeoutMS))
	if n < 0 {
		return 0, fabErr("fi_cq_read", n)
	}
	return int(n), nil
}

func completionErr(c *fabricCompletion, where string) error {
	if c.err == 0 {
		return nil
	}
	return &fabricError{where: where, code: int(c.err), prov: int(c.prov_errno)}
}

func (e *fabricEnd) avInsert(addr string) (uint64, error) {
	if len(addr) == 0 || len(addr) > maxFabricAddr {
		return 0, fmt.Errorf("fi_av_insert: address of %d bytes", len(addr))
	}
	b := C.CBytes([]byte(addr))
	defer C.free(b)
	var out C.uint64_t
	if rc := C.cell_av_insert(e.f, b, &out); rc != 0 {
		return 0, fabErr("fi_av_insert", rc)
	}
	return uint64(out), nil
}

func (e *fabricEnd) avRemove(a uint64) error {
	return fabErr("fi_av_remove", C.cell_av_remove(e.f, C.uint64_t(a)))
}

func (e *fabricEnd) postRecv(buf unsafe.Pointer, n int, desc, ctx unsafe.Pointer) C.int {
	return C.cell_post_recv(e.f, buf, C.size_t(n), desc, ctx)
}

func (e *fabricEnd) send(buf unsafe.Pointer, n int, desc unsafe.Pointer, dest uint64, ctx unsafe.Pointer) C.int {
	return C.cell_send(e.f, buf, C.size_t(n), desc, C.uint64_t(dest), ctx)
}

// signal wakes a reap waiting on the queue.
func (e *fabricEnd) signal() { C.cell_cq_signal(e.f) }

// fabricContexts is an array of operation contexts in C memory, indexed.
type fabricContexts struct {
	base unsafe.Pointer
	size uintptr
	n    int
}

func newFabricContexts(n int) *fabricContexts {
	return &fabricContexts{base: C.cell_ctx_alloc(C.size_t(n)), size: uintptr(C.cell_ctx_size()), n: n}
}

func (c *fabricContexts) ptr(i int) unsafe.Pointer { return unsafe.Add(c.base, uintptr(i)*c.size) }

// index returns the index of a context pointer, or -1.
func (c *fabricContexts) index(p unsafe.Pointer) int {
	d := uintptr(p) - uintptr(c.base)
	if uintptr(p) < uintptr(c.base) || d%c.size != 0 || int(d/c.size) >= c.n {
		return -1
	}
	return int(d / c.size)
}

func (c *fabricContexts) free() {
	C.free(c.base)
	c.base = nil
}

// anonMap maps n bytes of anonymous memory (outside the Go heap).
func anonMap(n int) ([]byte, error) {
	n = (n + 4095) &^ 4095
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("rdma: map %d bytes: %w", n, err)
	}
	return b, nil
}

// pinRegion pins a region's memory when it is Go memory, so that
// libfabric may keep its address; a mapping needs nothing.
func pinRegion(p *runtime.Pinner, mem []byte) {
	if len(mem) > 0 {
		p.Pin(&mem[0])
	}
}

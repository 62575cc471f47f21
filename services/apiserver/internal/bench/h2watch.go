// This file holds a lean HTTP/2 client for the watch fan-out benchmark: many
// WatchPods calls on one connection, each event's type and name read
// straight from the frames.

package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// h2Watches is a lean watch client for the fan-out benchmark: n WatchPods
// calls on one HTTP/2 connection, all read by one goroutine with
// golang.org/x/net/http2's framer. The service sees ordinary gRPC calls
// (same headers, same request message, same flow control); what differs
// from a grpc-go client is that the driver does not run a goroutine, a
// receive buffer and a stream state machine per call. With 10,000 watchers
// on the same two cores as the service, grpc-go's client cost as much CPU
// per delivered event as the service itself, and the benchmark measured
// the driver. Every event is still received, framed, decoded (type and
// object name) and checked against what the writer created.
type h2Watches struct {
	conn   net.Conn
	fields eventFields
	fr     *http2.Framer
	bw     *bufio.Writer
	wmu    sync.Mutex // guards fr's writes, bw, henc and hbuf
	henc   *hpack.Encoder
	hbuf   bytes.Buffer

	streams []h2Stream // stream i has id 2i+1
	ready   func()     // called once per stream: response headers or failure
	event   func(typ, name []byte, at time.Time)

	done chan struct{} // closed when the reader has returned

	// Read side only (one goroutine).
	unread   int // bytes received on the connection not yet given back
	failures []string
}

type h2Stream struct {
	headers bool   // response headers seen
	ended   bool   // trailers or reset seen
	buf     []byte // bytes of a message not complete yet
	unread  int
}

// Flow-control windows: large, and given back once half is used, so that
// the service is never held up by this client's window.
const h2Window = 1 << 30

func dialH2Watches(addr string, n int, headers [][2]string, req []byte, ready func(), event func(typ, name []byte, at time.Time)) (*h2Watches, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	w := &h2Watches{conn: conn, fields: newEventFields(), bw: bufio.NewWriterSize(conn, 64<<10), streams: make([]h2Stream, n), ready: ready, event: event, done: make(chan struct{})}
	w.fr = http2.NewFramer(w.bw, bufio.NewReaderSize(conn, 64<<10))
	w.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	w.fr.SetReuseFrames()
	w.henc = hpack.NewEncoder(&w.hbuf)
	if _, err := w.bw.WriteString(http2.ClientPreface); err != nil {
		conn.Close()
		return nil, err
	}
	if err := w.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window}); err != nil {
		conn.Close()
		return nil, err
	}
	if err := w.fr.WriteWindowUpdate(0, h2Window-65535); err != nil {
		conn.Close()
		return nil, err
	}
	if err := w.bw.Flush(); err != nil {
		conn.Close()
		return nil, err
	}
	go w.read()
	// gRPC message framing: not compressed, 4-byte big-endian length.
	msg := make([]byte, 5+len(req))
	binary.BigEndian.PutUint32(msg[1:], uint32(len(req)))
	copy(msg[5:], req)
	for i := range n {
		if err := w.open(uint32(2*i+1), addr, headers, msg); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return w, nil
}

func (w *h2Watches) open(id uint32, addr string, headers [][2]string, msg []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.hbuf.Reset()
	for _, f := range append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/kplane.core.v1.PodService/WatchPods"},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}}, headers...) {
		if err := w.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	if err := w.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: w.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	if err := w.fr.WriteData(id, true, msg); err != nil {
		return err
	}
	return w.bw.Flush()
}

// write runs f with the writer and flushes.
func (w *h2Watches) write(f func() error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if err := f(); err == nil {
		_ = w.bw.Flush()
	}
}

// close ends every call (by closing the connection), waits for the reader
// to stop calling event and returns the failures it saw.
func (w *h2Watches) close() []string {
	w.conn.Close()
	<-w.done
	return w.failures
}

func (w *h2Watches) stream(id uint32) *h2Stream {
	i := int(id-1) / 2
	if id%2 == 0 || i >= len(w.streams) {
		return nil
	}
	return &w.streams[i]
}

func (w *h2Watches) fail(s *h2Stream, why string) {
	if why != "" && len(w.failures) < 3 {
		w.failures = append(w.failures, why)
	}
	if s != nil && !s.ended {
		s.ended = true
		if !s.headers {
			s.headers = true
			w.ready()
		}
	}
}

func (w *h2Watches) read() {
	defer close(w.done)
	for {
		f, err := w.fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				w.fail(nil, "read: "+err.Error())
			}
			for i := range w.streams {
				w.fail(&w.streams[i], "") // unblock whoever waits for headers
			}
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				w.write(w.fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				w.write(func() error { return w.fr.WritePing(true, data) })
			}
		case *http2.GoAwayFrame:
			w.fail(nil, fmt.Sprintf("GOAWAY %v", f.ErrCode))
		case *http2.RSTStreamFrame:
			w.fail(w.stream(f.StreamID), fmt.Sprintf("stream reset: %v", f.ErrCode))
		case *http2.MetaHeadersFrame:
			s := w.stream(f.StreamID)
			if s == nil {
				continue
			}
			if !s.headers {
				s.headers = true
				if st := f.PseudoValue("status"); st != "200" {
					w.fail(s, "HTTP status "+st)
				}
				w.ready()
			}
			if gs := headerValue(f, "grpc-status"); gs != "" && gs != "0" {
				w.fail(s, fmt.Sprintf("grpc-status %s: %s", gs, headerValue(f, "grpc-message")))
			}
			if f.StreamEnded() {
				s.ended = true
			}
		case *http2.DataFrame:
			w.data(f)
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// eventFields are the field numbers the reader picks an event's type and
// its pod's name by (Kubernetes' numbers, from the generated schema).
type eventFields struct{ typ, object, podMetadata, metaName protowire.Number }

func newEventFields() eventFields {
	num := func(m proto.Message, name protoreflect.Name) protowire.Number {
		return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
	}
	return eventFields{typ: num(&corev1.WatchPodsResponse{}, "type"), object: num(&corev1.WatchPodsResponse{}, "object"),
		podMetadata: num(&corev1.Pod{}, "metadata"), metaName: num(&metav1.ObjectMeta{}, "name")}
}

// data takes one DATA frame: every complete gRPC message in it is an event.
func (w *h2Watches) data(f *http2.DataFrame) {
	at := time.Now()
	n := int(f.Length)
	w.unread += n
	if w.unread >= h2Window/2 {
		inc := uint32(w.unread)
		w.unread = 0
		w.write(func() error { return w.fr.WriteWindowUpdate(0, inc) })
	}
	s := w.stream(f.StreamID)
	if s == nil {
		return
	}
	s.unread += n
	if s.unread >= h2Window/2 {
		inc, id := uint32(s.unread), f.StreamID
		s.unread = 0
		w.write(func() error { return w.fr.WriteWindowUpdate(id, inc) })
	}
	b := f.Data()
	if len(s.buf) > 0 {
		s.buf = append(s.buf, b...)
		b = s.buf
	}
	for len(b) >= 5 {
		l := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+l {
			break
		}
		if b[0] != 0 {
			w.fail(s, "compressed message")
			return
		}
		m := b[5 : 5+l]
		typ, obj := fieldBytes(m, w.fields.typ), fieldBytes(m, w.fields.object)
		w.event(typ, fieldBytes(fieldBytes(obj, w.fields.podMetadata), w.fields.metaName), at)
		b = b[5+l:]
	}
	// Keep what is left (a frame's data is only valid until the next read).
	s.buf = append(s.buf[:0], b...)
}

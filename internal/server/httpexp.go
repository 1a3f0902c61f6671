package server

// EXPERIMENT (issue 13, ADR 0013): the same HTTP handler served by
// github.com/valyala/fasthttp instead of net/http, selected by the hidden
// Options.ExperimentalHTTPServer so an A/B comparison runs one binary.
// This file exists only on the experiment commit; it does not enforce the
// listener's security limits (see docs/adr/0013-http-server.md).

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// newFastServer serves h with fasthttp: through fasthttpadaptor
// ("fasthttp"), or through thinAdapter for POST requests and the adaptor
// for the rest ("fasthttp-thin").
func newFastServer(mode string, h http.Handler) *fasthttp.Server {
	// fasthttpadaptor's strings (Method, Host, RequestURI, header values)
	// alias fasthttp's reused buffers; the metrics' sync.Map keeps the SQS
	// action as a key, and without copies the server panics within a
	// second ("HashTrieMap: ran out of hash bits"). The copies are part of
	// the adaptor's cost.
	adapted := fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Method = strings.Clone(r.Method)
		r.Host = strings.Clone(r.Host)
		r.RequestURI = strings.Clone(r.RequestURI)
		hdr := make(http.Header, len(r.Header))
		for k, vv := range r.Header {
			c := make([]string, len(vv))
			for i, v := range vv {
				c[i] = strings.Clone(v)
			}
			hdr[strings.Clone(k)] = c
		}
		r.Header = hdr
		h.ServeHTTP(w, r)
	}))
	handler := adapted
	if mode == "fasthttp-thin" {
		pool := &sync.Pool{New: func() any { return newThinExchange() }}
		handler = func(ctx *fasthttp.RequestCtx) {
			if !ctx.IsPost() {
				adapted(ctx)
				return
			}
			x := pool.Get().(*thinExchange)
			x.serve(ctx, h)
			x.reset()
			pool.Put(x)
		}
	}
	return &fasthttp.Server{
		Handler:               handler,
		ReadTimeout:           60 * time.Second,
		IdleTimeout:           120 * time.Second,
		ReadBufferSize:        64 << 10,
		MaxRequestBodySize:    4 << 20,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
	}
}

// thinExchange is a reusable http.Request and http.ResponseWriter over one
// fasthttp request: no goroutine per request, header maps reused.
type thinExchange struct {
	req    http.Request
	url    url.URL
	hdr    http.Header
	body   bytes.Reader
	rcBody thinBody
	ctx    *fasthttp.RequestCtx
	out    http.Header
	status int
}

type thinBody struct{ r *bytes.Reader }

func (b thinBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b thinBody) Close() error               { return nil }

func newThinExchange() *thinExchange {
	return &thinExchange{hdr: http.Header{}, out: http.Header{}}
}

func (x *thinExchange) reset() {
	clear(x.hdr)
	clear(x.out)
	x.ctx = nil
	x.status = 0
	x.req = http.Request{}
	x.body.Reset(nil)
}

func (x *thinExchange) serve(ctx *fasthttp.RequestCtx, h http.Handler) {
	x.ctx = ctx
	for k, v := range ctx.Request.Header.All() {
		x.hdr.Add(string(k), string(v))
	}
	x.url = url.URL{}
	if err := x.url.UnmarshalBinary(ctx.RequestURI()); err != nil {
		ctx.Error("bad request URI", fasthttp.StatusBadRequest)
		return
	}
	body := ctx.PostBody()
	x.body.Reset(body)
	x.rcBody = thinBody{&x.body}
	x.req = http.Request{
		Method: "POST", URL: &x.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: x.hdr, Body: x.rcBody, ContentLength: int64(len(body)),
		Host: string(ctx.Host()), RemoteAddr: ctx.RemoteAddr().String(), RequestURI: string(ctx.RequestURI()),
	}
	h.ServeHTTP(x, x.req.WithContext(context.Context(ctx)))
	if x.status == 0 {
		x.WriteHeader(http.StatusOK)
	}
}

func (x *thinExchange) Header() http.Header { return x.out }

func (x *thinExchange) WriteHeader(code int) {
	if x.status != 0 {
		return
	}
	x.status = code
	x.ctx.SetStatusCode(code)
	for k, vv := range x.out {
		if k == "Content-Length" {
			if n, err := strconv.Atoi(vv[0]); err == nil {
				x.ctx.Response.Header.SetContentLength(n)
			}
			continue
		}
		for _, v := range vv {
			x.ctx.Response.Header.Add(k, v)
		}
	}
}

func (x *thinExchange) Write(p []byte) (int, error) {
	if x.status == 0 {
		x.WriteHeader(http.StatusOK)
	}
	return x.ctx.Write(p)
}

//go:build clade_checkout

package clade

// `go test -tags clade_checkout`: the checkout's header and its build/
// folder, with an rpath (the bindings test of meson puts its own build
// folder first through CGO_LDFLAGS). Without the tag: cgo_pkgconfig.go.

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../build -lclade -Wl,-rpath,${SRCDIR}/../../build
*/
import "C"

//go:build !clade_checkout

package clade

// The library and its header through pkg-config (clade.pc: an install to
// /usr/local, or a private prefix with PKG_CONFIG_PATH). pkg-config gives
// -L and -lclade, no rpath: where the loader does not search the prefix,
// build with CGO_LDFLAGS="-Wl,-rpath,$(pkg-config --variable=libdir clade)"
// (README: Bindings). The checkout's own tests use cgo_checkout.go instead.

/*
#cgo pkg-config: clade
*/
import "C"

// Package example is the Example's handler: it sends its downstream call without
// the request's context.
package example

import (
	"io"
	"net/http"
)

func Stock(w http.ResponseWriter, r *http.Request) {
	resp, err := http.Get("http://inventory.internal/stock/tea")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	io.Copy(w, resp.Body)
}

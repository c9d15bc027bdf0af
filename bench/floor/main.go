// floor-extender: the least a scheduler extender that binds can cost, as a
// measuring stick for bench/e2e.sh's "floor" row (never a product part).
//
// Filter passes one node, the first named with fewer than 8 pods counted on
// it (the count is kept in memory only, as kube-scheduler does not count the
// GPUs, which it ignores); bind posts the pod's Binding, as this project's
// extender does, in JSON over HTTP/2, at most 64 at once (the extender's bind
// threads) and again after a 429's Retry-After (as client-go does), so that
// the API server's priority and fairness queues refuse none of them for good.
// No ledger, no watches, no reasons for the nodes it drops. What kube-scheduler and the API server spend for a pod
// in this row is what any extender in the loop costs them; the rest of the
// extender row's cost is this project's.
//
//	floor-extender serve --listen ADDR [any other flag, ignored]
//
// The API server, its CA and the token come from CLUSTER_API_URL,
// CLUSTER_CA_FILE and CLUSTER_EXTENDER_TOKEN_FILE (test/cluster/cluster.sh).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	perNode       = 8
	bindsInFlight = 64 // as many as the extender's bind threads
	maxRetries    = 10 // client-go's for a 429
)

type filterArgs struct {
	NodeNames *[]string
}

type filterResult struct {
	NodeNames   []string
	FailedNodes map[string]string
	Error       string
}

type bindArgs struct {
	PodName, PodNamespace, PodUID, Node string
}

type floor struct {
	mu     sync.Mutex
	counts map[string]int
	api    string
	token  string
	client *http.Client
	slots  chan struct{} // a bind in flight holds one
}

func (f *floor) filter(w http.ResponseWriter, r *http.Request) {
	var args filterArgs
	res := filterResult{FailedNodes: map[string]string{}}
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		res.Error = err.Error()
	} else if args.NodeNames == nil {
		res.Error = "floor-extender needs nodeCacheCapable: true (NodeNames)"
	} else {
		f.mu.Lock()
		for _, n := range *args.NodeNames {
			if f.counts[n] < perNode {
				f.counts[n]++
				res.NodeNames = []string{n}
				break
			}
		}
		f.mu.Unlock()
	}
	writeJSON(w, res)
}

func (f *floor) bind(w http.ResponseWriter, r *http.Request) {
	var args bindArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		writeJSON(w, map[string]string{"Error": err.Error()})
		return
	}
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"metadata": map[string]any{"name": args.PodName, "namespace": args.PodNamespace, "uid": args.PodUID},
		"target":   map[string]string{"apiVersion": "v1", "kind": "Node", "name": args.Node},
	})
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/binding", f.api, args.PodNamespace, args.PodName)
	f.slots <- struct{}{}
	msg := f.post(url, body)
	<-f.slots
	writeJSON(w, map[string]string{"Error": msg})
}

// post sends the Binding, again after a 429's Retry-After (a second if it
// names none), as client-go does; "" when the API server took it.
func (f *floor) post(url string, body []byte) string {
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := f.client.Do(req)
		if err != nil {
			return err.Error()
		}
		reply, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && attempt < maxRetries {
			wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || wait < 1 {
				wait = 1
			}
			time.Sleep(time.Duration(wait) * time.Second)
			continue
		}
		if resp.StatusCode/100 != 2 {
			return fmt.Sprintf("binding: HTTP %d: %s", resp.StatusCode, reply)
		}
		return ""
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func main() {
	listen := ""
	for i := 1; i+1 < len(os.Args); i++ {
		if os.Args[i] == "--listen" {
			listen = os.Args[i+1]
		}
	}
	if len(os.Args) < 2 || os.Args[1] != "serve" || listen == "" {
		log.Fatal("usage: floor-extender serve --listen ADDR")
	}
	ca, err := os.ReadFile(os.Getenv("CLUSTER_CA_FILE"))
	if err != nil {
		log.Fatal(err)
	}
	token, err := os.ReadFile(os.Getenv("CLUSTER_EXTENDER_TOKEN_FILE"))
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}
	f := &floor{counts: map[string]int{}, api: os.Getenv("CLUSTER_API_URL"),
		token: strings.TrimSpace(string(token)), client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
		slots: make(chan struct{}, bindsInFlight)}
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", f.filter)
	mux.HandleFunc("/bind", f.bind)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	log.Fatal(http.ListenAndServe(listen, mux))
}

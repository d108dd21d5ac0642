// kubelet-configz prints, on the real node, the kubelet's own word for the
// configuration it runs: its /configz endpoint (the KubeletConfiguration after its
// file, its drop-ins, its flags and its defaults, as `{"kubeletconfig": {...}}`).
// The tests compare every field nodemem reads of the kubelet with it (issue 58).
//
// The bed's control plane cannot reach the node's kubelet port (qemu's user network
// has no route from the host to the guest), so the apiserver's node proxy is not the
// way; the kubelet's own server is asked from the node, with the node's client
// certificate, which the kubelet's x509 authentication accepts (its clientCAFile is the
// cluster's CA; its authorization is AlwaysAllow in the bed). The kubelet's serving
// certificate is its own self-signed one: not verified.
//
//	kubelet-configz -url https://127.0.0.1:10250/configz -cert node.crt -key node.key
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	url := flag.String("url", "https://127.0.0.1:10250/configz", "the kubelet's /configz")
	cert := flag.String("cert", "/etc/kubernetes/pki/node.crt", "the client certificate")
	key := flag.String("key", "/etc/kubernetes/pki/node.key", "its key")
	flag.Parse()
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client certificate:", err)
		os.Exit(1)
	}
	client := &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			Certificates:       []tls.Certificate{pair},
			InsecureSkipVerify: true,
		}},
	}
	resp, err := client.Get(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "GET:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the answer:", err)
		os.Exit(1)
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "%s: %s\n", resp.Status, body)
		os.Exit(1)
	}
	os.Stdout.Write(body)
}

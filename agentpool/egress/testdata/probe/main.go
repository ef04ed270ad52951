// Command probe tries one way out of a sandbox and prints what happened, for the restricted-egress
// test (agentpool/egress/docker_test.go). It always exits 0: the output is the result.
//
//	probe get URL          GET through $HTTP_PROXY (as any tool honouring it would)
//	probe connect HOST:PORT CONNECT through $HTTPS_PROXY, then GET / through the tunnel
//	probe direct HOST:PORT  a TCP connection with no proxy
//	probe post URL KEY BODY POST JSON with x-api-key, no proxy (the model gateway's forwarder)
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Println("usage: probe get|connect|direct|post ARG")
		return
	}
	arg := os.Args[2]
	switch os.Args[1] {
	case "get":
		pu, err := url.Parse(os.Getenv("HTTP_PROXY"))
		if err != nil || pu.Host == "" {
			fmt.Printf("ERROR no HTTP_PROXY: %q\n", os.Getenv("HTTP_PROXY"))
			return
		}
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
		report(c.Get(arg))
	case "post":
		req, _ := http.NewRequest(http.MethodPost, arg, strings.NewReader(os.Args[4]))
		req.Header.Set("x-api-key", os.Args[3])
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("content-type", "application/json")
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
		report(c.Do(req))
	case "connect":
		pu, err := url.Parse(os.Getenv("HTTPS_PROXY"))
		if err != nil || pu.Host == "" {
			fmt.Printf("ERROR no HTTPS_PROXY: %q\n", os.Getenv("HTTPS_PROXY"))
			return
		}
		conn, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", arg, arg)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			report(resp, err)
			return
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", arg)
		report(http.ReadResponse(br, nil))
	case "direct":
		conn, err := net.DialTimeout("tcp", arg, 10*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			return
		}
		conn.Close()
		fmt.Println("CONNECTED")
	default:
		fmt.Println("ERROR unknown mode", os.Args[1])
	}
}

func report(resp *http.Response, err error) {
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("STATUS %d\n%s\n", resp.StatusCode, b)
}

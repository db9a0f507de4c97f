// A minimal go-plugin plugin, built by the plugin provider's tests from Debian's packages
// (golang-github-hashicorp-go-plugin-dev 1.0.1, golang-google-grpc-dev) in GOPATH mode.
// It serves go-plugin's own test service (github.com/hashicorp/go-plugin/test/grpc,
// service grpctest.Test) with hashicorp's Serve, so that flotilla's side of the process
// protocol (cookie, handshake line, health service "plugin", GRPCController.Shutdown,
// AutoMTLS) is judged by hashicorp's code rather than by ours. The cookie is flotilla's.
package main

import (
	"context"
	"log"

	plugin "github.com/hashicorp/go-plugin"
	grpctest "github.com/hashicorp/go-plugin/test/grpc"
	"google.golang.org/grpc"
)

type testServer struct {
	*grpctest.UnimplementedTestServer
}

func (testServer) Double(ctx context.Context, req *grpctest.TestRequest) (*grpctest.TestResponse, error) {
	// go-plugin points the standard logger at the original stderr: the host reads it.
	log.Printf("go peer doubling %d", req.Input)
	return &grpctest.TestResponse{Output: req.Input * 2}, nil
}

type testPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (testPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	grpctest.RegisterTestServer(s, testServer{&grpctest.UnimplementedTestServer{}})
	return nil
}

func (testPlugin) GRPCClient(ctx context.Context, broker *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return grpctest.NewTestClient(c), nil
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: plugin.HandshakeConfig{
			ProtocolVersion:  1,
			MagicCookieKey:   "FLOTILLA_PLUGIN_MAGIC_COOKIE",
			MagicCookieValue: "7c4b1e9a-instance-group-d2f05c83",
		},
		Plugins:    map[string]plugin.Plugin{"test": testPlugin{}},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}

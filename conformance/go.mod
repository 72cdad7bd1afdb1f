module github.com/keylimit/keylimit/conformance

go 1.26.0

replace (
	github.com/keylimit/keylimit => ../
	github.com/keylimit/keylimit/grpclimit => ../grpclimit
)

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/dunglas/httpsfv v1.1.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/keylimit/keylimit v0.1.0
	github.com/keylimit/keylimit/grpclimit v0.1.0
	github.com/stretchr/testify v1.12.1
	google.golang.org/grpc v1.85.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

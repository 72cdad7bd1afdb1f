module github.com/keylimit/keylimit

go 1.26.0

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

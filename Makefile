# Hourglass: the targets people use. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
FUNCTIONS := enqueue seckill poller consumer
# Lambda runs the functions on provided.al2023, arm64.
LAMBDA_ARCH ?= arm64
# The CDK CLI, pinned and installed into .cdk/ by make deploy (never globally).
CDK_VERSION ?= 2.1148.1
CDK         := .cdk/node_modules/.bin/cdk
# Extra arguments of cdk deploy, e.g. CDK_ARGS='-c jwtIssuer=https://... --profile prod'.
CDK_ARGS    ?=

.PHONY: help build run test vet bench synth deploy clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

build: ## Build the Lambda bootstraps (linux/arm64, stripped) into dist/<function>/
	@command -v zip >/dev/null || { echo "make build needs zip (apt-get install zip)"; exit 1; }
	@for fn in $(FUNCTIONS); do \
	  mkdir -p dist/$$fn; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$(LAMBDA_ARCH) $(GO) build -trimpath -tags lambda.norpc \
	    -ldflags='-s -w -buildid=' -o dist/$$fn/bootstrap ./functions/$$fn; \
	  rm -f dist/$$fn/function.zip; \
	  (cd dist/$$fn && zip -q -X function.zip bootstrap); \
	  printf '  dist/%-9s bootstrap %6s KiB, function.zip %6s KiB\n' $$fn \
	    $$(( $$(stat -c %s dist/$$fn/bootstrap) / 1024 )) $$(( $$(stat -c %s dist/$$fn/function.zip) / 1024 )); \
	done

run: ## Run the whole system locally on an embedded Redis (REDIS_URL to use your own)
	$(GO) run ./cmd/hourglass serve

vet: ## go vet and gofmt
	$(GO) vet ./...
	@out=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: vet node_modules/.bin/dynalite ## Every test, with the race detector (spawns its own redis-server and dynalite processes)
	$(GO) test -race -count=1 -timeout 30m ./...

# dynalite, a DynamoDB-compatible server the DynamoDB ledger tests start.
node_modules/.bin/dynalite: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

bench: ## Benchmarks of the delay queue and dispatch, on a spawned redis-server
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./shared/delayq/ ./shared/poller/ ./shared/dispatch/

synth: build ## Build, then synthesize the CDK stack offline into cdk.out/ (Hourglass.template.json)
	rm -rf cdk.out
	$(GO) run ./infra
	@echo "  cdk.out/Hourglass.template.json: $$(( $$(stat -c %s cdk.out/Hourglass.template.json) / 1024 )) KiB"

deploy: build $(CDK) ## Build, then cdk deploy the stack to the current AWS account (CDK_ARGS='-c key=value ...')
	cd infra && ../$(CDK) deploy Hourglass $(CDK_ARGS)

# The CLI itself, in .cdk/ (make deploy installs it; docs/deploy.md uses it
# for bootstrap and destroy). Its `cdk init` templates hold .go files that
# are not Go; they go, so that gofmt -l . (make vet) stays clean.
$(CDK):
	@command -v npm >/dev/null || { echo "make deploy needs Node.js 20+ and npm"; exit 1; }
	npm install --prefix .cdk --no-save --no-audit --no-fund --loglevel=error aws-cdk@$(CDK_VERSION)
	find .cdk -name '*.go' -delete

clean: ## Remove build output
	rm -rf dist cdk.out

# Hourglass: the targets people use. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
FUNCTIONS := enqueue seckill poller consumer operator
# Lambda runs the functions on provided.al2023, arm64.
LAMBDA_ARCH ?= arm64
# The CDK CLI, pinned and installed into .cdk/ by make deploy (never globally).
CDK_VERSION ?= 2.1148.1
CDK         := .cdk/node_modules/.bin/cdk
# Extra arguments of cdk deploy, e.g. CDK_ARGS='-c jwtIssuer=https://... -c profile=dev --profile my-aws-account'
# (-c profile= is Hourglass's size, --profile the AWS CLI's credentials).
CDK_ARGS    ?=
# Context of make synth, e.g. SYNTH_ARGS='-c profile=dev'.
SYNTH_ARGS  ?=
# The Lambda runtime interface emulator (make e2e, make invoke), pinned and
# installed into bin/ (never globally); the functions' bootstraps for this
# machine go to bin/host/<function>/.
RIE_VERSION ?= v0.0.0-20261030222936-bef5c4ba774d
RIE         := bin/aws-lambda-rie
# make run ARGS='...': flags of hourglass serve (--addr, --redis-url, --log-metrics).
ARGS ?=
# Where make run builds the binary.
HOURGLASS_BIN ?= bin/hourglass
# make invoke FN=<function> EVENT=events/<file>.json [TIMEOUT=<seconds>]
FN      ?=
EVENT   ?=
TIMEOUT ?= 10
# The operator role make invoke allows on the admin routes unless your
# environment sets HOURGLASS_ADMIN_ROLE_ARNS: the role whose session the
# admin fixtures (events/admin-stats.json, events/seckill-preheat.json,
# events/admin-operator.json) name.
INVOKE_ADMIN_ROLE ?= arn:aws:iam::123456789012:role/hourglass-operator

# Fuzz targets, as package:Target; make test runs each for FUZZ_SHORT
# executions, make fuzz for FUZZTIME. FUZZ_SHORT is a count, not a duration:
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", golang/go#75804, fixed in 1.27) on a
# busy machine; a count has no deadline to race. Crashers land in the package's testdata/fuzz/ and
# stay there as regression cases.
FUZZ_TARGETS := ./shared/withdrawal:FuzzParseRequest ./shared/httpapi:FuzzParsePurchase ./shared/seckill:FuzzParseOrderJob \
  ./shared/httpapi:FuzzParsePreheat ./shared/seckill:FuzzSaleCheck ./shared/dispatch:FuzzDecodeJob ./shared/consumer:FuzzConsumerEvent \
  ./shared/payout:FuzzPayResponse ./shared/signature:FuzzVerify ./shared/httpapi:FuzzServe \
  ./shared/httpapi:FuzzRequestParts
FUZZ_SHORT ?= 20000x
FUZZTIME   ?= 1m
# make check-model: runs of each model checker.
MODEL_RUNS ?= 10000
# make soak: how long the load runs, and how hard.
SOAK_DURATION ?= 5m
SOAK_RATE     ?= 250
SOAK_SHORT    ?= 30s

.PHONY: help build run test vet lint bench synth deploy smoke clean fuzz soak tools

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

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

run: ## Build bin/hourglass, then run the whole system locally on an embedded Redis (REDIS_URL to use your own; ARGS='--addr ...')
	@echo "make run: building $(HOURGLASS_BIN) (the first build downloads modules and compiles about 430 packages:"
	@echo "          minutes on a small machine; later builds take seconds), then starting it. Ctrl-C stops it."
	@total=$$($(GO) list -deps ./cmd/hourglass | wc -l); n=0; \
	$(GO) build -v -o $(HOURGLASS_BIN) ./cmd/hourglass 2>&1 | while IFS= read -r line; do \
	  case "$$line" in \
	    *' '*|'#'*) printf '\n%s\n' "$$line" ;; \
	    *) n=$$((n + 1)); \
	       if [ -t 1 ]; then printf '\r  compiling %3d/%d %-60.60s' "$$n" "$$total" "$$line"; \
	       elif [ $$((n % 50)) -eq 1 ]; then echo "  compiling $$n/$$total $$line"; fi ;; \
	  esac; \
	done; [ -t 1 ] && printf '\r%-80s\r' '' || true
	@echo "make run: starting $(HOURGLASS_BIN) serve $(ARGS)"
	@# Job control gives the server a process group of its own and the
	@# terminal: Ctrl-C reaches it alone, it finishes its claimed work and
	@# exits 0, and so does make. (The command after it keeps bash from
	@# exec-ing the server in its own place, which would skip job control.)
	@set -m; $(HOURGLASS_BIN) serve $(ARGS); status=$$?; exit $$status

vet: ## go vet and gofmt
	$(GO) vet ./...
	@out=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The first run builds golangci-lint (about 4 min); later runs reuse Go's
# build cache and golangci-lint's own (seconds). Its settings: .golangci.yml.
lint: ## golangci-lint v2 (pinned in go.mod) over the whole tree
	$(GO) tool golangci-lint run ./...

tools: ## Install what the tests need when missing (redis-server, zip, npm, chromium, curl, jq; apt-get): .ci/provision
	@bash .ci/provision

# tools first: vet and npm ci need what it installs.
test: tools vet lint node_modules/.bin/dynalite ## golangci-lint, then every test, with the race detector (spawns its own redis-server and dynalite processes), then each fuzz target for FUZZ_SHORT (20000 executions)
	$(GO) test -race -count=1 -timeout 30m ./...
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SHORT)

fuzz: ## Each fuzz target for FUZZTIME (1m; make test runs them for FUZZ_SHORT, 20000 executions)
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$fn ($$pkg) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg | grep -v '^fuzz: elapsed' || exit 1; \
	done

soak: ## hourglass serve on a spawned redis-server under a mixed vegeta load for SOAK_DURATION (5m); writes bench/soak.md
	$(GO) run ./internal/soak -duration $(SOAK_DURATION) -rate $(SOAK_RATE) -out bench/soak.md

# node_modules (package.json): dynalite, a DynamoDB-compatible server the
# DynamoDB ledger tests start, and cfn-guard with the Control Tower rules
# (make synth, the infra tests). npm ci installs them all; dynalite stands
# for the lot.
node_modules/.bin/dynalite: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: e2e invoke rie test-faults check-model screenshots

screenshots: node_modules/.bin/dynalite ## Retake the dashboard's screenshots in docs/img (the Chromium test, with HOURGLASS_DOC_SHOTS=1)
	HOURGLASS_DOC_SHOTS=1 $(GO) test -count=1 -run '^TestDashboardInChromium$$' ./internal/cli/

test-faults: node_modules/.bin/dynalite ## Fault runs (SIGKILLs, Redis crash, provider errors, SQS failures, cluster failover, toxiproxy network faults) judged by the history checker, then a 30 s soak (leaks, lost or repeated payouts)
	HOURGLASS_FAULT_RUNS=1 $(GO) test -race -count=1 -v -timeout 20m -run '^TestFault' ./internal/faults/
	@out=$$(mktemp); status=0; \
	$(GO) run ./internal/soak -duration $(SOAK_SHORT) -rate $(SOAK_RATE) -out $$out > /dev/null || status=$$?; \
	sed -n '/^\*\*Verdict/p' $$out; [ $$status -eq 0 ] || cat $$out; rm -f $$out; exit $$status

check-model: node_modules/.bin/dynalite ## The model checkers (withdrawals on Redis and DynamoDB, the flash sale) for MODEL_RUNS runs each (10000): runs, steps, distinct states, what they found
	@mkdir -p bin; status=0; \
	MODEL_RUNS=$(MODEL_RUNS) $(GO) test -count=1 -v -timeout 0 -run 'Model' ./internal/modelcheck/ ./shared/seckill/ \
	  > bin/check-model.log 2>&1 || status=$$?; \
	grep -E '^(model|--- FAIL|FAIL|ok)|failed after' bin/check-model.log; echo "the whole log: bin/check-model.log"; exit $$status

e2e: rie ## Build the functions for this machine and run a withdrawal, a flash sale and the operator commands through them under the Lambda emulator
	@$(call host_bootstraps,$(FUNCTIONS))
	HOURGLASS_RIE=$(CURDIR)/$(RIE) HOURGLASS_BOOTSTRAPS=$(CURDIR)/bin/host \
	  $(GO) test -count=1 -v -timeout 5m -run '^TestE2E$$' ./internal/e2e/

invoke: rie ## Run one function under the Lambda emulator with your environment: make invoke FN=enqueue EVENT=events/healthz.json
	@[ -n "$(FN)" ] && [ -n "$(EVENT)" ] || { echo "usage: make invoke FN=<function> EVENT=events/<file>.json [TIMEOUT=<seconds>]; functions: $(FUNCTIONS)"; exit 2; }
	@case " $(FUNCTIONS) " in *" $(FN) "*) ;; *) echo "FN=$(FN): not one of $(FUNCTIONS)"; exit 2;; esac
	@$(call host_bootstraps,$(FN))
	@HOURGLASS_ADMIN_ROLE_ARNS="$${HOURGLASS_ADMIN_ROLE_ARNS-$(INVOKE_ADMIN_ROLE)}" \
	  $(GO) run ./internal/rie/invoke -emulator $(RIE) -bootstrap bin/host/$(FN)/bootstrap -name $(FN) -event $(EVENT) -timeout $(TIMEOUT)s

# host_bootstraps builds the bootstraps of the functions named in $(1) for
# this machine, with the flags of make build.
define host_bootstraps
for fn in $(1); do \
  mkdir -p bin/host/$$fn; \
  CGO_ENABLED=0 GOOS=$$($(GO) env GOHOSTOS) GOARCH=$$($(GO) env GOHOSTARCH) $(GO) build -trimpath -tags lambda.norpc \
    -ldflags='-s -w -buildid=' -o bin/host/$$fn/bootstrap ./functions/$$fn; \
done
endef

# rie installs the pinned emulator into bin/ unless it is there already.
rie:
	@$(GO) version -m $(RIE) 2>/dev/null | grep -q 'aws-lambda-runtime-interface-emulator[[:space:]]*$(RIE_VERSION)' || { \
	  echo "installing aws-lambda-rie $(RIE_VERSION) into bin/"; \
	  GOBIN=$(CURDIR)/bin $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION); }

bench: rie node_modules/.bin/dynalite ## Every performance target of SPEC.md against its baseline (about 5 min): bench/results.md
	@$(call host_bootstraps,$(FUNCTIONS))
	$(GO) run ./bench -out bench -rie $(RIE) -bootstraps bin/host $(BENCH_ARGS)

synth: build node_modules/.bin/dynalite ## Build, synthesize the CDK stack offline into cdk.out/ (Hourglass.template.json), check it with cdk-nag and cfn-guard (SYNTH_ARGS='-c profile=dev')
	rm -rf cdk.out
	$(GO) run ./infra $(SYNTH_ARGS)
	@echo "  cdk.out/Hourglass.template.json: $$(( $$(stat -c %s cdk.out/Hourglass.template.json) / 1024 )) KiB"

deploy: build $(CDK) ## Build, then cdk deploy the stack to the current AWS account (CDK_ARGS='-c key=value ...')
	cd infra && ../$(CDK) deploy Hourglass $(CDK_ARGS)

# make smoke: the stack to test (make deploy's is Hourglass), and extra
# flags of hourglass smoke, e.g. SMOKE_ARGS='--json --destination acct_test'.
STACK      ?= Hourglass
SMOKE_ARGS ?=

smoke: ## Smoke-test a deployed stack (STACK=Hourglass; needs HOURGLASS_SMOKE_TOKEN and an adminRoleArns role's AWS credentials): withdrawals, a sale, a consumer failure, an alarm fired, then what to check by hand
	$(GO) run ./cmd/hourglass smoke --stack "$(STACK)" $(SMOKE_ARGS)

# The CLI itself, in .cdk/ (make deploy installs it; docs/deploy.md uses it
# for bootstrap and destroy). Its `cdk init` templates hold .go files that
# are not Go; they go, so that gofmt -l . (make vet) stays clean.
$(CDK):
	@command -v npm >/dev/null || { echo "make deploy needs Node.js 20+ and npm"; exit 1; }
	npm install --prefix .cdk --no-save --no-audit --no-fund --loglevel=error aws-cdk@$(CDK_VERSION)
	find .cdk -name '*.go' -delete

clean: ## Remove build output
	rm -rf dist cdk.out

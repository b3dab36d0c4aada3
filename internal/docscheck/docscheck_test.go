// Package docscheck checks that what the documentation names exists: every
// environment variable, program flag, metric, absolute path, `go run` or
// `go test` package, file of the repository and test name written in README.md, docs/*.md and
// examples/**/README.md is found in the repository's non-documentation
// files (Go, YAML, JSON, shell, CI), or is on the allowlist below with the
// reason it is external. It runs with the README's test command.
package docscheck

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/proxyless-grpc/xds/internal/testutils"
)

// TestMain ends with a goroutine leak check (go.uber.org/goleak), as every
// test package of the module does.
func TestMain(m *testing.M) { testutils.VerifyNoLeaks(m) }

const root = "../.."

// allow lists names the documentation may cite although no file of this
// repository has them, each with why.
var allow = map[string]string{
	// Environment variables read by others.
	"GRPC_GO_LOG_VERBOSITY_LEVEL":                "grpc-go's logger reads it",
	"GRPC_EXPERIMENTAL_XDS_MTLS_SPIFFE":          "grpc-go's; the README says this library does not read it",
	"GRPC_EXPERIMENTAL_XDS_BOOTSTRAP_CALL_CREDS": "grpc-go's; the README says this library does not read it",
	"XDSBENCH_HEAPPROF_DIR":                      "the shared bench's (../shared/bench, outside this repository)",
	// Flags of other programs.
	"-scenario":   "the shared bench's flag (../shared/bench)",
	"-impls":      "the shared bench's flag (../shared/bench)",
	"-race":       "go test's flag",
	"-count":      "go test's flag",
	"-run":        "go test's flag",
	"-timeout":    "go test's flag",
	"-bench":      "go test's flag",
	"-fuzz":       "go test's flag",
	"-fuzztime":   "go test's flag",
	"-benchtime":  "go test's flag",
	"-cpuprofile": "go test's flag",
	"-memprofile": "go test's flag",
	"-plaintext":  "grpcurl's flag",
	"-f":          "kubectl's and docker's flag",
	"-n":          "kubectl's flag",
	"-t":          "docker's flag",
	"-C":          "the go command's flag",
	"-overlay":    "go build's flag",
	"-o":          "go build's flag",
	"-trimpath":   "go build's flag",
	// Paths outside the repository's files.
	"/var/lib/istio/data/cert-chain.pem":  "written by istio-agent in the pod",
	"/var/lib/istio/data/key.pem":         "written by istio-agent in the pod",
	"/var/lib/istio/data/root-cert.pem":   "written by istio-agent in the pod",
	"/etc/istio/proxy/XDS":                "istio-agent's socket in the pod",
	"/var/run/secrets/tokens/istio-token": "a projected service account token's path in the pod (security.md's recipe)",
	"/shop.Cart/":                         "a path prefix of filters.md's made-up example service",
	// Not flags: suffixes of header and label names written on their own.
	"-bin":       "the suffix of binary gRPC metadata keys",
	"-remaining": "x-ratelimit-remaining, written as a suffix",
	"-reset":     "x-ratelimit-reset, written as a suffix",
	"-revision":  "a Kubernetes label name's suffix (service.istio.io/canonical-revision)",
	// Packages of grpc-go, named by their path in grpc-go's repository.
	"internal/xds/xdsclient": "grpc-go's internal xDS client package",
	"interop/grpc_testing":   "grpc-go's test service package",
	// Not tests.
	"TestService": "grpc.testing.TestService, grpc-go's test service",
}

var (
	backtick   = regexp.MustCompile("`([^`\n]+)`")
	envVar     = regexp.MustCompile(`\b(?:GRPC|XDS|XDSBENCH)_[A-Z0-9_]*[A-Z0-9]\b`)
	flagSpan   = regexp.MustCompile(`^(-{1,2}[a-zA-Z][a-zA-Z0-9-]*)(?:[= ].*)?$`)
	metric     = regexp.MustCompile(`\b(?:grpc\.xds_(?:server|client)\.[a-z0-9_.]*[a-z0-9_]|istio_[a-z_]*[a-z]|grpc_(?:xds_server|xds_client|server)_[a-z_]*)`)
	absPath    = regexp.MustCompile(`^/[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*/?$`)
	goCommand  = regexp.MustCompile(`\bgo (?:run|test|build|vet)\b[^` + "`" + `\n]*`)
	pkgArg     = regexp.MustCompile(`(?:^|\s)(\./[A-Za-z0-9_./-]*)`)
	cdDir      = regexp.MustCompile(`\bcd ([A-Za-z0-9_./-]+)`)
	repoPath   = regexp.MustCompile(`(?:^|[\s=(])((?:examples|docs|interop|e2e|internal|scripts|api)/[A-Za-z0-9_./*-]*[A-Za-z0-9_/*])`)
	testName   = regexp.MustCompile(`\b((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)(\*?)`)
	flagDefine = regexp.MustCompile(`\.(?:String|Bool|Duration|Int|Int64|Uint|Float64|Func|Var|TextVar|StringVar|BoolVar|DurationVar|IntVar|Int64Var|UintVar|Float64Var)\([^"\n]*"([a-z][a-z0-9-]*)"`)
)

// docs returns the documentation files, relative to root.
func docs(t *testing.T) []string {
	files := []string{"README.md"}
	more, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, f := range more {
		rel, _ := filepath.Rel(root, f)
		files = append(files, rel)
	}
	filepath.WalkDir(filepath.Join(root, "examples"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "README.md" {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	if len(files) < 5 {
		t.Fatalf("found only %v: not run from internal/docscheck?", files)
	}
	return files
}

// corpus is every non-documentation file the checks look in, concatenated.
func corpus(t *testing.T) []byte {
	var b bytes.Buffer
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "vendor", "docscheck":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".yaml", ".yml", ".json", ".sh", ".proto", ".js", ".mod":
		default:
			if d.Name() != "run" && d.Name() != "Dockerfile" {
				return nil
			}
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b.Write(data)
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// span is a backticked span, or a line of a code block (fenced or indented
// by four spaces), of a Markdown document.
type span struct {
	text       string
	backticked bool
}

func code(md string) []span {
	var out []span
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(line, "    ") && !strings.HasPrefix(strings.TrimSpace(line), "-") {
			out = append(out, span{strings.TrimSpace(line), false})
			continue
		}
		for _, m := range backtick.FindAllStringSubmatch(line, -1) {
			out = append(out, span{m[1], true})
		}
	}
	return out
}

func TestDocumentedNamesExist(t *testing.T) {
	src := corpus(t)
	flags := map[string]bool{}
	for _, m := range flagDefine.FindAllSubmatch(src, -1) {
		flags["-"+string(m[1])] = true
	}
	missing := map[string][]string{} // name -> docs
	miss := func(name, doc string) {
		if _, ok := allow[name]; !ok {
			missing[name] = append(missing[name], doc)
		}
	}
	checked := 0
	for _, doc := range docs(t) {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range envVar.FindAllString(string(data), -1) {
			checked++
			if !bytes.Contains(src, []byte(v)) {
				miss(v, doc)
			}
		}
		for _, sp := range code(string(data)) {
			span := sp.text
			for _, m := range metric.FindAllString(span, -1) {
				checked++
				if !bytes.Contains(src, []byte(strings.TrimSuffix(m, "_"))) {
					miss(m, doc)
				}
			}
			// A code line starting with "-" is a diff or a YAML list, not a flag.
			if m := flagSpan.FindStringSubmatch(span); m != nil && sp.backticked {
				checked++
				if !flags[m[1]] {
					miss(m[1], doc)
				}
			}
			if absPath.MatchString(span) {
				checked++
				if !bytes.Contains(src, []byte(strings.TrimSuffix(span, "/"))) {
					miss(span, doc)
				}
			}
			for _, m := range repoPath.FindAllStringSubmatch(span, -1) {
				checked++
				if found, _ := filepath.Glob(filepath.Join(root, strings.TrimSuffix(m[1], "..."))); len(found) == 0 {
					miss(m[1], doc)
				}
			}
			for _, m := range testName.FindAllStringSubmatch(span, -1) {
				checked++
				want := "func " + m[1]
				if m[2] == "" {
					want += "("
				}
				if !bytes.Contains(src, []byte(want)) {
					miss(m[1]+m[2], doc)
				}
			}
			for _, cmd := range goCommand.FindAllString(span, -1) {
				base := root
				if c := cdDir.FindStringSubmatch(span); c != nil {
					base = filepath.Join(root, c[1])
				}
				for _, p := range pkgArg.FindAllStringSubmatch(cmd, -1) {
					checked++
					dir := strings.TrimSuffix(strings.TrimSuffix(p[1], "..."), "/")
					if _, err := os.Stat(filepath.Join(base, dir)); err != nil {
						if _, err := os.Stat(filepath.Join(root, filepath.Dir(doc), dir)); err != nil {
							miss("go package "+p[1], doc)
						}
					}
				}
				for _, f := range strings.Fields(cmd) {
					if strings.HasPrefix(f, "-") && !strings.Contains(cmd, "go test") && !strings.Contains(cmd, "go build") && !strings.Contains(cmd, "go vet") {
						name, _, _ := strings.Cut(f, "=")
						checked++
						if !flags[name] {
							miss(name, doc)
						}
					}
				}
			}
		}
	}
	t.Logf("checked %d names", checked)
	if checked < 100 {
		t.Errorf("checked only %d names: the extraction is broken", checked)
	}
	var names []string
	for n := range missing {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("%s: named in %v, found in no file of the repository (and not allowlisted)", n, dedup(missing[n]))
	}
}

func dedup(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

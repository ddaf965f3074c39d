// Package docscheck holds the test that keeps the docs true: README.md and
// docs/*.md link only to files and headings that exist, name only make
// targets the Makefile has and hourglass subcommands internal/cli has, and
// every docs/*.md that Go code or the Makefile points to exists.
package docscheck

// Package archtest holds the house rules of STYLE.md as tests: the dependency
// direction between packages, and exactly one package doc per package.
package archtest

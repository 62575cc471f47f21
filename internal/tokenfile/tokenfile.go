// Package tokenfile reads Kubernetes' static token file (--token-auth-file):
// the bearer tokens the API service, and the gateway in impersonation mode,
// accept, each with its user.
package tokenfile

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kplane/kplane/proto/identity"
)

// Tokens maps a bearer token to its user.
type Tokens map[string]identity.User

// Read reads the token file at path.
func Read(path string) (Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open token file: %w", err)
	}
	defer f.Close()
	tokens, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return tokens, nil
}

// Parse reads Kubernetes' static token CSV: one `token,user,uid[,groups]`
// record per line, groups being one comma-separated field (quote it). Records
// with fewer than three fields, an empty token or an empty user are errors; a
// repeated token is an error too (Kubernetes warns and keeps the last; a
// refusal is safer).
func Parse(r io.Reader) (Tokens, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	tokens := Tokens{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return tokens, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < 3 {
			return nil, fmt.Errorf("line %d: want token,user,uid[,groups], got %d fields", line, len(rec))
		}
		token, name, uid := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		if token == "" || name == "" {
			return nil, fmt.Errorf("line %d: empty token or user", line)
		}
		if _, dup := tokens[token]; dup {
			return nil, fmt.Errorf("line %d: duplicate token", line)
		}
		u := identity.User{Name: name, UID: uid}
		if len(rec) > 3 {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		tokens[token] = u
	}
}

// StaticToken returns the user of token (its groups a copy the caller may
// change), if the file holds it.
func (t Tokens) StaticToken(token string) (identity.User, bool) {
	u, ok := t[token]
	u.Groups = slices.Clone(u.Groups)
	return u, ok
}

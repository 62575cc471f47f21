// This file holds how the generator reads Kubernetes' documentation of
// its types from the k8s.io/api sources (the comments above each type and
// field) and writes it into the proto files.

package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

type typeDoc struct {
	Doc    string
	Fields map[string]string
}

// doc returns the doc comments of Go type name in package pkgPath, parsing
// the package's sources the first time.
func (g *gen) doc(pkgPath, name string) typeDoc {
	docs, ok := g.docs[pkgPath]
	if !ok {
		docs = map[string]typeDoc{}
		g.docs[pkgPath] = docs
		dir := ""
		for mod, d := range g.modDirs {
			if pkgPath == mod || strings.HasPrefix(pkgPath, mod+"/") {
				dir = filepath.Join(d, strings.TrimPrefix(pkgPath, mod))
			}
		}
		if dir != "" {
			parseDocs(dir, docs)
		}
	}
	return docs[name]
}

func parseDocs(dir string, docs map[string]typeDoc) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || strings.HasPrefix(n, "zz_") ||
			strings.Contains(n, "generated") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			continue
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				td := typeDoc{Fields: map[string]string{}}
				if ts.Doc != nil {
					td.Doc = cleanDoc(ts.Doc.Text())
				} else if gd.Doc != nil && len(gd.Specs) == 1 {
					td.Doc = cleanDoc(gd.Doc.Text())
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, fl := range st.Fields.List {
						if fl.Doc == nil {
							continue
						}
						for _, nm := range fl.Names {
							td.Fields[nm.Name] = cleanDoc(fl.Doc.Text())
						}
						if len(fl.Names) == 0 {
							// An embedded field is named after its type.
							typ := fl.Type
							if st, ok := typ.(*ast.StarExpr); ok {
								typ = st.X
							}
							switch x := typ.(type) {
							case *ast.Ident:
								td.Fields[x.Name] = cleanDoc(fl.Doc.Text())
							case *ast.SelectorExpr:
								td.Fields[x.Sel.Name] = cleanDoc(fl.Doc.Text())
							}
						}
					}
				}
				docs[ts.Name.Name] = td
			}
		}
	}
}

// cleanDoc drops code-generator markers (+optional, +listType=...) and
// what follows a "---" line (notes for implementers), as Kubernetes'
// OpenAPI generator does.
func cleanDoc(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "---") {
			break
		}
		if strings.HasPrefix(t, "+") || strings.HasPrefix(t, "TODO") {
			continue
		}
		out = append(out, strings.TrimRight(l, " \t"))
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	for len(out) > 0 && out[0] == "" {
		out = out[1:]
	}
	return strings.Join(out, "\n")
}

func writeComment(b *bytes.Buffer, indent, doc string) {
	if doc == "" {
		return
	}
	for _, l := range strings.Split(doc, "\n") {
		if l == "" {
			fmt.Fprintf(b, "%s//\n", indent)
		} else {
			fmt.Fprintf(b, "%s// %s\n", indent, l)
		}
	}
}

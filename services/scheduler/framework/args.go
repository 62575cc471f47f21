// This file holds how a plugin's args from the config file reach its
// factory, as JSON.

package framework

import "encoding/json"

// marshalArgs turns a plugin's args from the config file into the JSON its
// factory decodes.
func marshalArgs(args map[string]any) ([]byte, error) { return json.Marshal(args) }

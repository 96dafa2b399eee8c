"""The message model: roles, parts, tool-call units, validation; blocks and tag escaping. The ground floor."""

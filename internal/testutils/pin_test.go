// Pins dependencies that work in progress (server credentials, RBAC, CSDS
// and metrics) needs, so that parallel work does not edit go.mod. Delete an
// import once real code uses it; none is left.
package testutils

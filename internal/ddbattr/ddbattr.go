// Package ddbattr holds what the lease table's codec and the decoders of
// other libraries' tables both need to say about DynamoDB attribute values.
package ddbattr

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TypeName names av's type for an error message ("a string", "a number
// set", ...), or "missing" for none.
func TypeName(av types.AttributeValue) string {
	switch av.(type) {
	case nil:
		return "missing"
	case *types.AttributeValueMemberS:
		return "a string"
	case *types.AttributeValueMemberN:
		return "a number"
	case *types.AttributeValueMemberB:
		return "binary"
	case *types.AttributeValueMemberBOOL:
		return "a boolean"
	case *types.AttributeValueMemberNULL:
		return "null"
	case *types.AttributeValueMemberSS:
		return "a string set"
	case *types.AttributeValueMemberNS:
		return "a number set"
	case *types.AttributeValueMemberBS:
		return "a binary set"
	case *types.AttributeValueMemberL:
		return "a list"
	case *types.AttributeValueMemberM:
		return "a map"
	}
	return fmt.Sprintf("%T", av)
}

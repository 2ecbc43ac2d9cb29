package ddbattr

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestTypeName(t *testing.T) {
	for _, c := range []struct {
		av   types.AttributeValue
		want string
	}{
		{nil, "missing"},
		{&types.AttributeValueMemberS{Value: "x"}, "a string"},
		{&types.AttributeValueMemberN{Value: "1"}, "a number"},
		{&types.AttributeValueMemberB{}, "binary"},
		{&types.AttributeValueMemberBOOL{}, "a boolean"},
		{&types.AttributeValueMemberNULL{}, "null"},
		{&types.AttributeValueMemberSS{}, "a string set"},
		{&types.AttributeValueMemberNS{}, "a number set"},
		{&types.AttributeValueMemberBS{}, "a binary set"},
		{&types.AttributeValueMemberL{}, "a list"},
		{&types.AttributeValueMemberM{}, "a map"},
		{&types.UnknownUnionMember{Tag: "X"}, "*types.UnknownUnionMember"},
	} {
		if got := TypeName(c.av); got != c.want {
			t.Errorf("TypeName(%T) = %q, want %q", c.av, got, c.want)
		}
	}
}
